"""``dlperf data bert-hdf5|-tfrecord|-ofrecord|-gluonnlp|-paddle|-kit``: BERT pre-training data
from the user's corpus and ``vocab.txt``, made once by ``bert_instances`` (Google's
create_pretraining_data.py algorithm) and written in each source's format:

- ``bert-hdf5``: DeepLearningExamples PyTorch's shards (``training-NNNNN-of-NNNNN.hdf5``, the
  datasets and dtypes its create_pretraining_data.py writes), by h5py;
- ``bert-tfrecord``: NGC TF1 BERT's ``training/part-NNNNN-of-NNNNN.tfrecord``
  (``tf.train.Example``), by TensorFlow's ``TFRecordWriter`` in the kit's TensorFlow
  environment;
- ``bert-ofrecord``: OneFlow-Benchmark BERT's ``part-0`` ... (``OFRecord``), by OneFlow's own
  ``record_pb2`` in the kit's OneFlow environment;
- ``bert-gluonnlp``: gluon-nlp's ``train/*.npz`` and ``eval/*.npz``, by numpy (as gluon-nlp's
  script saves them), its ids those of the gluon-nlp vocabulary JSON given as ``vocab``;
- ``bert-paddle``: paddle-models BERT's ``train/*.gz`` and ``validation/*.gz`` text lines, with
  the ``vocab.txt`` it reads;
- ``bert-kit``: the kit's own BERT scripts' ``shard_NNNNN.npz`` (PyTorch/README.md), with the
  ``vocab.txt``.

The hdf5, TFRecord and Paddle folders get the ``bert_config.json`` (BERT-base, the vocabulary's
size) that those sources' commands read from ``data_dir``; every folder gets the manifest. Each
shard is written whole or not at all and kept when there, so a stopped run resumes.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from driver.datasets.bert_instances import (
    COMMAND_LINE,
    Corpus,
    Parameters,
    Vocabulary,
    features,
    scan_corpus,
    shard_instances,
)
from driver.datasets.framework_writer import check_shards, run_job
from driver.datasets.imagenet import _size
from driver.datasets.manifest import claim, write_manifest
from driver.files import ensure_dir, write_bytes
from driver.schema import ConfigError

CONFIG = "bert_config.json"
BATCH = 16  # shards handed to one framework start-up (a few seconds each)


def bert_base_config(vocab_size: int) -> dict[str, Any]:
    """BERT-base (DLPerf's BERT rows) over the given vocabulary, in BertConfig's keys."""
    return {
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": 768,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "type_vocab_size": 2,
        "vocab_size": vocab_size,
    }


def _hdf5_writer(out: Path, shards: int, _vocab: Vocabulary) -> tuple[list[Path], Callable]:
    """DeepLearningExamples PyTorch reads every file of ``--input_dir`` whose name holds
    ``training``, the six datasets below (create_pretraining_data.py's dtypes, gzip)."""
    paths = [out / f"training-{n:05d}-of-{shards:05d}.hdf5" for n in range(shards)]
    dtypes = {
        "input_ids": "i4",
        "input_mask": "i1",
        "segment_ids": "i1",
        "masked_lm_positions": "i4",
        "masked_lm_ids": "i4",
        "next_sentence_labels": "i1",
    }

    try:
        import h5py
    except ImportError:
        raise ConfigError(
            COMMAND_LINE,
            "bert-hdf5",
            "needs h5py in the driver's environment: pip install 'dlperf[data]'",
        ) from None

    def write(batch: list[tuple[int, dict[str, Any]]]) -> None:
        for number, arrays in batch:
            # made in memory, written by the kit's atomic writer: h5py meets a full disk as an
            # error of its C library (then a crash), and its temporary name holds no "training"
            # (the reader would take a leftover for data)
            shard = io.BytesIO()
            with h5py.File(shard, "w") as stream:
                for name, dtype in dtypes.items():
                    stream.create_dataset(name, data=arrays[name], dtype=dtype, compression="gzip")
            write_bytes(paths[number], shard.getvalue())

    return paths, write


def _framework_writer(framework: str, kind: str, out: Path, paths: list[Path]) -> Callable:
    """A batch of shards handed to ``_writers.py``'s ``kind`` in ``framework``'s environment,
    their arrays as ``.npz`` files beside, removed here when the job ends, whatever happened
    (a full disk must not leave them behind)."""

    def write(batch: list[tuple[int, dict[str, Any]]]) -> None:
        import numpy as np

        handed = [out / f".shard-{number:05d}.npz" for number, _arrays in batch]
        try:
            job = []
            for (number, arrays), npz in zip(batch, handed, strict=True):
                stream = io.BytesIO()  # written by the kit's writer: an error names the file
                np.savez(stream, **arrays)
                write_bytes(npz, stream.getvalue())
                job.append({"path": str(paths[number]), "features": str(npz),
                            "partial": str(out / f".shard-{number:05d}.partial")})  # fmt: skip
            run_job(framework, kind, {"shards": job}, out)
        finally:
            for npz in handed:
                npz.unlink(missing_ok=True)

    return write


def _tfrecord_writer(out: Path, shards: int, _vocab: Vocabulary) -> tuple[list[Path], Callable]:
    """NGC TF1 BERT globs ``--input_files_dir/*``: the shards alone in ``training/``."""
    folder = ensure_dir(out / "training")
    paths = [folder / f"part-{n:05d}-of-{shards:05d}.tfrecord" for n in range(shards)]
    return paths, _framework_writer("tensorflow", "bert-tfrecord", out, paths)


def _ofrecord_writer(out: Path, shards: int, _vocab: Vocabulary) -> tuple[list[Path], Callable]:
    """OneFlow-Benchmark BERT's reader takes ``part-0`` to ``part-<data_part_num - 1>`` (no
    zero padding: the reader's default ``part_name_suffix_length``)."""
    paths = [out / f"part-{n}" for n in range(shards)]
    return paths, _framework_writer("oneflow", "bert-ofrecord", out, paths)


GLUON_FIELDS = ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                "masked_lm_weights")  # fmt: skip


def _gluonnlp_writer(out: Path, shards: int, _vocab: Vocabulary) -> tuple[list[Path], Callable]:
    """gluon-nlp's ``create_pretraining_data.py`` output, which its ``run_pretraining.py``
    loads with ``NumpyDataset`` (``np.load(allow_pickle=True)``): per instance unpadded int32
    ``input_ids``, ``segment_ids``, ``masked_lm_positions``, ``masked_lm_ids`` and float32
    ``masked_lm_weights`` (object arrays), int32 ``next_sentence_labels`` and
    ``valid_lengths``; ``np.savez_compressed``. The last shard is the eval split."""
    if shards < 2:
        raise ConfigError(COMMAND_LINE, "--shards", "must be 2 or more (the last is eval/)")
    paths = [out / "train" / f"part-{n:05d}.npz" for n in range(shards - 1)]
    paths.append(out / "eval" / f"part-{shards - 1:05d}.npz")

    def write(batch: list[tuple[int, dict[str, Any]]]) -> None:
        import numpy as np

        for number, arrays in batch:
            valid = arrays["input_mask"].sum(axis=1).astype(np.int32)
            masked = (arrays["masked_lm_weights"] > 0).sum(axis=1)
            outputs: dict[str, Any] = {}
            for name in GLUON_FIELDS:
                widths = masked if name.startswith("masked") else valid
                column = np.empty(len(valid), dtype=object)  # ragged rows, as gluon-nlp's
                for row, width in enumerate(widths):
                    column[row] = np.ascontiguousarray(arrays[name][row, :width])
                outputs[name] = column
            outputs["next_sentence_labels"] = arrays["next_sentence_labels"].astype(np.int32)
            outputs["valid_lengths"] = valid
            shard = io.BytesIO()
            np.savez_compressed(shard, **outputs)
            write_bytes(paths[number], shard.getvalue())

    return paths, write


PADDLE_SEP_ID = 2


def _paddle_writer(out: Path, shards: int, _vocab: Vocabulary) -> tuple[list[Path], Callable]:
    """paddle-models BERT's gzip text files, which its ``reader/pretraining.py`` parses a line
    at a time: ``token_ids;sent_ids;pos_ids;label`` (ids space-separated, [CLS] and both [SEP]
    included, label 1 when B follows A). Train holds the pairs whose B follows A, unmasked: the
    reader masks each batch and, by default, makes the negative pairs itself (it asserts label 1
    there). The last shard, the validation split, holds both kinds, as they were drawn."""
    if shards < 2:
        raise ConfigError(COMMAND_LINE, "--shards", "must be 2 or more (the last is validation/)")
    paths = [out / "train" / f"part-{n:05d}.gz" for n in range(shards - 1)]
    paths.append(out / "validation" / f"part-{shards - 1:05d}.gz")

    def write(batch: list[tuple[int, dict[str, Any]]]) -> None:
        import gzip

        for number, arrays in batch:
            validation = number == shards - 1
            lines = []
            for row, ids in enumerate(arrays["input_ids"]):
                is_next = int(arrays["next_sentence_labels"][row]) == 0
                if not (is_next or validation):
                    continue
                length = int(arrays["input_mask"][row].sum())
                original = ids[:length].copy()  # the reader masks: the tokens as in the text
                masked = int((arrays["masked_lm_weights"][row] > 0).sum())
                original[arrays["masked_lm_positions"][row, :masked]] = arrays["masked_lm_ids"][
                    row, :masked
                ]
                fields = (original, arrays["segment_ids"][row, :length], range(length))
                text = ";".join(" ".join(map(str, values)) for values in fields)
                lines.append(f"{text};{int(is_next)}\n")
            # mtime 0: the same bytes every run
            write_bytes(paths[number], gzip.compress("".join(lines).encode(), mtime=0))

    return paths, write


def _paddle_vocab(out: Path, vocab: Vocabulary) -> list[Path]:
    """The run reads ``{data_dir}/vocab.txt``: the vocabulary, [SEP] at id 2."""
    if vocab.kind != "vocab.txt" or vocab.ids["[SEP]"] != PADDLE_SEP_ID:
        raise ConfigError(
            vocab.path,
            "[SEP]",
            f"is id {vocab.ids['[SEP]']}: paddle-models' reader splits each pair at id "
            f"{PADDLE_SEP_ID} to make negative pairs; give a vocab.txt with [SEP] on line 3",
        )
    return [write_bytes(out / "vocab.txt", vocab.path.read_bytes())]


def _gluonnlp_vocab(_out: Path, vocab: Vocabulary) -> list[Path]:
    """gluon-nlp's model reads ids of its own vocabulary object: a vocab.txt's line numbers
    would silently be other tokens."""
    if vocab.kind != "gluonnlp-json":
        raise ConfigError(
            vocab.path,
            "(file)",
            "is a vocab.txt: gluon-nlp's run reads ids of its own vocabulary (for the default "
            "--dataset_name, book_corpus_wiki_en_uncased-<hash>.vocab under ~/.mxnet/models), "
            "in an order of its own; give that JSON file",
        )
    return []


# The kit's own BERT scripts' shards (PyTorch/benchmark/data.py reads every {data_dir}/*.npz):
# each array's dtype, and -1 where a masked-token label is padding.
KIT_ARRAYS = {"input_ids": "int32", "segment_ids": "int8", "input_mask": "int8",
              "masked_lm_positions": "int32", "masked_lm_ids": "int32",
              "next_sentence_labels": "int8"}  # fmt: skip
KIT_PADDED_LABEL = -1


def _kit_writer(out: Path, shards: int, vocab: Vocabulary) -> tuple[list[Path], Callable]:
    """``shard_NNNNN.npz`` (``np.savez``) of :data:`KIT_ARRAYS` and a ``meta`` JSON string
    (``seq_len``, ``max_predictions``, ``vocab_size``, ``tokenizer``), the format the kit's
    own BERT reads (PyTorch/README.md): masked-token labels -1 where padded."""
    paths = [out / f"shard_{n:05d}.npz" for n in range(shards)]

    def write(batch: list[tuple[int, dict[str, Any]]]) -> None:
        import numpy as np

        for number, arrays in batch:
            labels = np.where(
                arrays["masked_lm_weights"] > 0, arrays["masked_lm_ids"], KIT_PADDED_LABEL
            )
            outputs = {
                name: (labels if name == "masked_lm_ids" else arrays[name]).astype(dtype)
                for name, dtype in KIT_ARRAYS.items()
            }
            meta = {
                "seq_len": int(arrays["input_ids"].shape[1]),
                "max_predictions": int(arrays["masked_lm_positions"].shape[1]),
                "vocab_size": len(vocab.words),
                "tokenizer": f"BERT WordPiece ({vocab.path.name}, dlperf data bert-kit)",
            }
            shard = io.BytesIO()
            np.savez(shard, meta=np.asarray(json.dumps(meta, sort_keys=True)), **outputs)
            write_bytes(paths[number], shard.getvalue())

    return paths, write


def _kit_vocab(out: Path, vocab: Vocabulary) -> list[Path]:
    """The vocabulary beside the shards, for whoever reads the ids back."""
    if vocab.kind != "vocab.txt":
        raise ConfigError(vocab.path, "(file)", "is not a vocab.txt; give BERT's vocab.txt")
    return [write_bytes(out / "vocab.txt", vocab.path.read_bytes())]


@dataclass(frozen=True)
class Format:
    writer: Callable[[Path, int, Vocabulary], tuple[list[Path], Callable]]
    per_call: int  # shards handed to one writer call
    shards: int  # default: bertPrep.py's 256, or the part count the source's command passes
    config: bool  # the source reads {data_dir}/bert_config.json
    help: str
    extra: Callable[[Path, Vocabulary], list[Path]] | None = None  # more files the source reads


FORMATS = {
    "bert-hdf5": Format(_hdf5_writer, 1, 256, True,
                        "BERT hdf5 shards (DeepLearningExamples PyTorch)"),
    "bert-tfrecord": Format(_tfrecord_writer, BATCH, 256, True, "BERT TFRecords (NGC TF1 BERT)"),
    "bert-ofrecord": Format(_ofrecord_writer, BATCH, 64, False,
                            "BERT OFRecord parts (OneFlow-Benchmark BERT)"),
    "bert-gluonnlp": Format(_gluonnlp_writer, 1, 256, False,
                            "BERT .npz files (gluon-nlp scripts/bert)", _gluonnlp_vocab),
    "bert-paddle": Format(_paddle_writer, 1, 256, True,
                          "BERT gzip text files (paddle-models BERT)", _paddle_vocab),
    "bert-kit": Format(_kit_writer, 1, 16, False,
                       "BERT .npz shards (the kit's own BERT scripts)", _kit_vocab),
}  # fmt: skip


def prepare_bert(args: argparse.Namespace) -> int:
    """Make the format's shards not yet there, its bert_config.json and the manifest; state
    what was made, sizes, times and the set's identity."""
    start = time.monotonic()
    params = Parameters(**{key: getattr(args, key) for key in OPTIONS}, lower_case=not args.cased)
    params.check()
    check_shards("--shards", args.shards)
    vocab = Vocabulary(args.vocab, params.lower_case)
    corpus = scan_corpus(args.corpus)
    spans = corpus.shard_ranges(args.shards)
    out = ensure_dir(args.out)
    fmt = FORMATS[args.format]
    facts = _source_facts(corpus, vocab, params)
    _claim(out, {"format": args.format, "shards": len(spans), **facts})
    paths, write = fmt.writer(out, len(spans), vocab)
    extra = fmt.extra(out, vocab) if fmt.extra else []  # checks the vocabulary first
    made, shards_made = 0, 0
    batch: list[tuple[int, dict[str, Any]]] = []
    for number, span in enumerate(spans):
        if paths[number].exists():
            continue
        instances = shard_instances(corpus, span, vocab, params)
        made, shards_made = made + len(instances), shards_made + 1
        batch.append((number, features(instances, vocab, params)))
        if len(batch) >= fmt.per_call:
            write(batch)
            batch = []
    if batch:
        write(batch)
    files = [*paths, *extra]
    if fmt.config:
        config = bert_base_config(len(vocab.words))
        files.append(write_bytes(out / CONFIG, (json.dumps(config, indent=2) + "\n").encode()))
    written = time.monotonic()
    identity = write_manifest(out, args.format, files, facts)
    total = sum(p.stat().st_size for p in files)
    print(
        f"{args.format}: {corpus.documents} documents -> {len(paths)} shards ({shards_made} "
        f"made now, {made} instances), {_size(total)} in {out}; made in "
        f"{written - start:.1f} s, hashed in "
        f"{time.monotonic() - written:.1f} s\ndataset_sha256: {identity}",
        file=sys.stderr,
    )
    print(identity)
    return 0


JOB = ".dlperf-bert-job.json"
# Parameters set by an option of the same name each (--max-seq-length ...; --cased: lower_case).
OPTIONS = tuple(field.name for field in fields(Parameters) if field.name != "lower_case")


def _claim(out: Path, job: dict[str, Any]) -> None:
    """Note what the shards in ``out`` are made from, before making any: a later run resumes
    only the same job, never mixing shards of another corpus, vocabulary or parameters."""
    rest = {key: value for key, value in job.items() if key != "format"}
    claim(out, job["format"], rest, note=JOB)  # the note's bytes as before: folders resume


def _source_facts(corpus: Corpus, vocab: Vocabulary, params: Parameters) -> dict[str, Any]:
    return {
        "dataset": "bert-text",
        "corpus": corpus.facts(),
        "vocab": {
            "name": vocab.path.name,
            "kind": vocab.kind,
            "sha256": vocab.sha256,
            "tokens": len(vocab.words),
        },  # fmt: skip
        "parameters": {
            "max_seq_length": params.max_seq_length,
            "max_predictions_per_seq": params.max_predictions_per_seq,
            "masked_lm_prob": params.masked_lm_prob,
            "dupe_factor": params.dupe_factor,
            "short_seq_prob": params.short_seq_prob,
            "random_seed": params.seed,
            "do_lower_case": params.lower_case,
        },
    }


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    defaults = Parameters()
    for name, fmt in FORMATS.items():
        parser = subparsers.add_parser(name, help=f"{fmt.help} from a text corpus and vocab.txt")
        parser.add_argument(
            "corpus",
            type=Path,
            help="UTF-8 text, one sentence a line, a blank line between documents (a file, or "
            "a folder of files read in name order)",
        )
        parser.add_argument("vocab", type=Path, help="BERT's vocab.txt (one token a line)")
        parser.add_argument("out", type=Path, help="the folder to write (made; resumed if there)")
        parser.add_argument("--shards", type=int, default=fmt.shards,
                            help=f"output shards (default {fmt.shards})")  # fmt: skip
        for key in OPTIONS:
            default = getattr(defaults, key)
            parser.add_argument("--" + key.replace("_", "-"), type=type(default), default=default)
        parser.add_argument(
            "--cased", action="store_true", help="keep case and accents (a cased vocab.txt)"
        )
        parser.set_defaults(func=prepare_bert, format=name)
