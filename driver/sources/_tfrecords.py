"""Synthetic BERT pre-training TFRecords for upstream BERT scripts that read only TFRecords.

tensorflow/models' ``run_pretraining.py`` has no synthetic-data flag: it reads TFRecords of the
features ``create_pretraining_data.py`` writes. This module writes a few random examples of
exactly those features (the CPU runs of a source need no corpus; the dataset repeats). It runs
inside the source's own environment (it needs TensorFlow), as::

    python -m driver.sources._tfrecords OUT.tfrecord --seq-length 32 --predictions 5 \\
        --vocab-size 1024 --examples 64
"""

from __future__ import annotations

import argparse
import random


def write_examples(
    path: str, seq_length: int, predictions: int, vocab_size: int, examples: int, seed: int = 0
) -> None:
    import tensorflow as tf  # only in the source's environment

    def ints(values: list[int]) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def floats(values: list[float]) -> tf.train.Feature:
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    rng = random.Random(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(examples):
            split = rng.randint(1, seq_length - 1)
            positions = sorted(rng.sample(range(1, seq_length), predictions))
            features = {
                "input_ids": ints([rng.randrange(5, vocab_size) for _ in range(seq_length)]),
                "input_mask": ints([1] * seq_length),
                "segment_ids": ints([0] * split + [1] * (seq_length - split)),
                "masked_lm_positions": ints(positions),
                "masked_lm_ids": ints([rng.randrange(5, vocab_size) for _ in positions]),
                "masked_lm_weights": floats([1.0] * predictions),
                "next_sentence_labels": ints([rng.randint(0, 1)]),
            }
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    parser.add_argument("--seq-length", type=int, required=True)
    parser.add_argument("--predictions", type=int, required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    parser.add_argument("--examples", type=int, default=64)
    args = parser.parse_args(argv)
    if not 0 < args.predictions < args.seq_length:
        parser.error("--predictions must be between 1 and --seq-length - 1")
    write_examples(args.output, args.seq_length, args.predictions, args.vocab_size, args.examples)


if __name__ == "__main__":
    main()
