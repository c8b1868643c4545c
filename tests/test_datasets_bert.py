"""``dlperf data bert-*``: BERT pre-training instances from a small corpus and vocabulary the
test writes, read back with each format's own reader (h5py; TensorFlow's TFRecordDataset with
NGC TF1 BERT's feature spec), checked against the corpus; resuming; bad input refused."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from driver.datasets.bert_instances import Parameters, Vocabulary, scan_corpus, shard_instances
from driver.datasets.manifest import MANIFEST, dataset_sha256, read_manifest
from driver.frontend.cli import main
from tests.real_frameworks import framework_env

WORDS = ("the quick brown fox jumps over a lazy dog while cat sleep near warm fire and bird sing "
         "song under blue sky").split()  # fmt: skip
SPECIAL = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SMALL = ["--shards", "2", "--max-seq-length", "32", "--max-predictions-per-seq", "5"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """12 documents of 1 to 6 sentences over WORDS (and "sings": two word pieces), and the
    vocab.txt holding them."""
    root = tmp_path_factory.mktemp("bert")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL, *WORDS, ".", "##s"]) + "\n")
    rng = random.Random(7)
    documents = []
    for _ in range(12):
        sentences = [
            " ".join(rng.choice([*WORDS, "Sings"]) for _ in range(rng.randint(3, 12))) + " ."
            for _ in range(rng.randint(1, 6))
        ]
        documents.append("\n".join(sentences))
    text = root / "corpus.txt"
    text.write_text("\n\n".join(documents) + "\n")
    return text, vocab


def make(fmt: str, corpus: tuple[Path, Path], out: Path, *extra: str) -> str:
    assert main(["data", fmt, str(corpus[0]), str(corpus[1]), str(out), *SMALL, *extra]) == 0
    return dataset_sha256(out) or ""


def document_streams(corpus: tuple[Path, Path]) -> list[str]:
    """Each document's tokens as one space-separated string, to find segments in."""
    vocab = Vocabulary(corpus[1], lower_case=True)
    texts = corpus[0].read_text().split("\n\n")
    return [" " + " ".join(t for line in d.splitlines() for t in vocab.tokenize(line)) + " "
            for d in texts]  # fmt: skip


def check_instances(
    arrays: dict[str, np.ndarray], corpus: tuple[Path, Path], words: list[str] | None = None
) -> None:
    """Every instance as create_pretraining_data.py makes it, checked against the corpus
    (``words``: the vocabulary's tokens by id, vocab.txt's lines unless given)."""
    words = words or corpus[1].read_text().splitlines()
    streams = document_streams(corpus)
    ids, mask, segments = arrays["input_ids"], arrays["input_mask"], arrays["segment_ids"]
    assert len(ids) > 12 and ids.shape[1] == 32 and arrays["masked_lm_ids"].shape[1] == 5
    for row in range(len(ids)):
        length = int(mask[row].sum())
        assert (mask[row, :length] == 1).all() and (ids[row, length:] == 0).all()
        # the masked positions: sorted, in the text; as many as round(15% of the length), at
        # most 5; padded with position 0 (the reader counts up to the first 0) and weight 0
        positions = arrays["masked_lm_positions"][row]
        count = int(np.argmax(positions == 0)) if (positions == 0).any() else len(positions)
        assert count == min(5, max(1, round(length * 0.15)))
        chosen = list(positions[:count])
        assert chosen == sorted(chosen) and all(0 < p < length for p in chosen)
        if "masked_lm_weights" in arrays:
            assert list(arrays["masked_lm_weights"][row]) == [1.0] * count + [0.0] * (5 - count)
        # the text before masking (a random replacement may be any vocabulary word, [SEP] too)
        original = [words[i] for i in ids[row, :length]]
        for position, label in zip(chosen, arrays["masked_lm_ids"][row, :count], strict=True):
            original[position] = words[label]
        seps = [i for i, t in enumerate(original) if t == "[SEP]"]
        assert original[0] == "[CLS]" and len(seps) == 2 and seps[1] == length - 1
        assert "[MASK]" not in original and not set(chosen) & {0, *seps}  # never [CLS]/[SEP]
        assert list(segments[row, :length]) == [0] * (seps[0] + 1) + [1] * (length - seps[0] - 1)
        # segment A and segment B each a run of one document's tokens; with label 0 (B is
        # the actual next), B after A in the same document (truncation trims either's ends)
        a = f" {' '.join(original[1 : seps[0]])} "
        b = f" {' '.join(original[seps[0] + 1 : -1])} "
        assert any(a in s for s in streams) and any(b in s for s in streams)
        if arrays["next_sentence_labels"][row].item() == 0:
            assert any(a in s and b in s[s.index(a) + len(a) - 1 :] for s in streams)
    labels = arrays["next_sentence_labels"].reshape(-1)
    assert 0 < labels.sum() < len(labels)  # both kinds of next sentence


def read_hdf5_file(path: Path) -> dict[str, np.ndarray]:
    import h5py

    with h5py.File(path, "r") as stream:
        return {name: stream[name][:] for name in stream}


def read_hdf5(out: Path) -> dict[str, np.ndarray]:
    parts = [read_hdf5_file(path) for path in sorted(out.glob("*training*"))]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def test_hdf5_shards_hold_create_pretraining_data_instances(
    corpus: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "hdf5"
    identity = make("bert-hdf5", corpus, out)
    names = sorted(p.name for p in out.iterdir() if p.name != ".dlperf-bert-job.json")
    assert names == ["bert_config.json", MANIFEST, "training-00000-of-00002.hdf5",
                     "training-00001-of-00002.hdf5"]  # fmt: skip
    import h5py

    with h5py.File(out / names[2], "r") as stream:
        # the datasets and dtypes DeepLearningExamples' create_pretraining_data.py writes
        assert {k: stream[k].dtype.str for k in stream} == {
            "input_ids": "<i4", "input_mask": "|i1", "segment_ids": "|i1",
            "masked_lm_positions": "<i4", "masked_lm_ids": "<i4", "next_sentence_labels": "|i1",
        }  # fmt: skip
    check_instances(read_hdf5(out), corpus)
    config = json.loads((out / "bert_config.json").read_text())
    assert config["vocab_size"] == len(corpus[1].read_text().splitlines())
    manifest = read_manifest(out)
    assert manifest["format"] == "bert-hdf5" and manifest["source"]["corpus"]["documents"] == 12
    assert manifest["source"]["parameters"]["max_seq_length"] == 32
    # seeded: the same corpus gives the same set; another seed another
    assert make("bert-hdf5", corpus, tmp_path / "again") == identity
    monkeypatch.chdir(tmp_path)  # an output folder relative to where it is typed
    assert make("bert-hdf5", corpus, Path("seed"), "--seed", "1") != identity
    # a folder of files: read in name order, documents running across shard boundaries; the
    # same documents give the same instances
    folder = tmp_path / "texts"
    folder.mkdir()
    documents = corpus[0].read_text().split("\n\n")
    (folder / "a.txt").write_text("\n\n".join(documents[:5]) + "\n")
    (folder / "b.txt").write_text("\n\n".join(documents[5:]))
    split = tmp_path / "split"
    assert main(["data", "bert-hdf5", str(folder), str(corpus[1]), str(split), *SMALL]) == 0
    for name, values in read_hdf5(split).items():
        assert (values == read_hdf5(out)[name]).all(), name
    # a run of other parameters into the same folder is refused: it would mix two sets
    argv = ["data", "bert-hdf5", str(corpus[0]), str(corpus[1]), str(out), *SMALL]
    assert main([*argv, "--seed", "2"]) == 2
    # resumed: a lost shard is made again, the one there is kept
    kept = (out / names[3]).stat().st_mtime_ns
    (out / names[2]).unlink()
    assert make("bert-hdf5", corpus, out) == identity
    assert (out / names[3]).stat().st_mtime_ns == kept


READ_TFRECORD = """
import sys, numpy as np, tensorflow as tf
seq, preds = 32, 5
spec = {name: tf.io.FixedLenFeature([seq], tf.int64)
        for name in ("input_ids", "input_mask", "segment_ids")}
spec.update({name: tf.io.FixedLenFeature([preds], tf.int64)
             for name in ("masked_lm_positions", "masked_lm_ids")})
spec["masked_lm_weights"] = tf.io.FixedLenFeature([preds], tf.float32)
spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
shards = sorted(tf.io.gfile.glob(sys.argv[2] + "/training/*"))  # as run_pretraining.py lists them
rows = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(shards)]
np.savez(sys.argv[1], **{k: np.stack([r[k].numpy() for r in rows]) for k in spec})
"""

# OneFlow's reader and raw decoders as OneFlow-Benchmark BERT's BertDecoder sets them up
READ_OFRECORD = """
import sys, numpy as np, oneflow as flow
seq, preds, count = 32, 5, int(sys.argv[3])
record = flow.nn.OFRecordReader(sys.argv[2], batch_size=count, data_part_num=2)()
shapes = {"input_ids": [seq], "input_mask": [seq], "segment_ids": [seq], "masked_lm_ids": [preds],
          "masked_lm_positions": [preds], "next_sentence_labels": [1]}
out = {name: flow.nn.OFRecordRawDecoder(name, shape=shape, dtype=flow.int32)(record).numpy()
       for name, shape in shapes.items()}
out["masked_lm_weights"] = flow.nn.OFRecordRawDecoder(
    "masked_lm_weights", shape=[preds], dtype=flow.float)(record).numpy()
np.savez(sys.argv[1], **out)
"""


def rows(arrays: dict[str, np.ndarray]) -> list[tuple]:
    """The instances as sortable rows (readers may interleave the shards)."""
    names = sorted(n for n in arrays if n != "masked_lm_weights")
    count = len(arrays["input_ids"])
    return sorted(tuple(arrays[n].reshape(count, -1)[i].tolist() for n in names)
                  for i in range(count))  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "framework", "reader", "files"),
    [
        ("bert-tfrecord", "tensorflow", READ_TFRECORD,
         ["training/part-00000-of-00002.tfrecord", "training/part-00001-of-00002.tfrecord",
          "bert_config.json"]),
        ("bert-ofrecord", "oneflow", READ_OFRECORD, ["part-0", "part-1"]),
    ],
)  # fmt: skip
def test_framework_formats_read_back_with_the_framework(
    fmt: str, framework: str, reader: str, files: list[str],
    corpus: tuple[Path, Path], tmp_path: Path,
) -> None:  # fmt: skip
    python = framework_env(framework)
    hdf5 = tmp_path / "hdf5"
    make("bert-hdf5", corpus, hdf5)
    expected = read_hdf5(hdf5)
    out = tmp_path / fmt
    make(fmt, corpus, out)
    assert sorted(read_manifest(out)["files"]) == sorted(files)
    assert not list(out.glob(".shard-*"))  # no features or partial file left behind
    read = tmp_path / "read.npz"
    subprocess.run(
        [python, "-c", reader, str(read), str(out), str(len(expected["input_ids"]))],
        check=True, capture_output=True,
    )  # fmt: skip
    with np.load(read) as loaded:
        arrays = {name: loaded[name] for name in loaded.files}
    check_instances(arrays, corpus)
    # the same instances as the hdf5 shards of the same corpus, seed and parameters
    assert rows(arrays) == rows(expected)


def read_gluonnlp(out: Path, split: str = "train") -> dict[str, np.ndarray]:
    """gluon-nlp's files as its NumpyDataset loads them, padded back to the other formats'
    arrays (zeros past each row's valid length, weights 1 for each prediction)."""
    loaded = []
    for path in sorted((out / split).glob("*.npz")):
        with np.load(path, allow_pickle=True) as data:
            loaded.append({key: data[key] for key in sorted(data.keys())})
    count = sum(len(part["valid_lengths"]) for part in loaded)
    arrays = {"input_mask": np.zeros((count, 32), np.int32)}
    for name, width in (("input_ids", 32), ("segment_ids", 32), ("masked_lm_positions", 5),
                        ("masked_lm_ids", 5), ("masked_lm_weights", 5)):  # fmt: skip
        arrays[name] = np.zeros((count, width), np.float32 if "weights" in name else np.int32)
    row = 0
    for part in loaded:
        assert part["next_sentence_labels"].dtype == part["valid_lengths"].dtype == np.int32
        for i, valid in enumerate(part["valid_lengths"]):
            assert len(part["input_ids"][i]) == valid and part["input_ids"][i].dtype == np.int32
            arrays["input_mask"][row, :valid] = 1
            for name in ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                         "masked_lm_weights"):  # fmt: skip
                arrays[name][row, : len(part[name][i])] = part[name][i]
            row += 1
    arrays["next_sentence_labels"] = np.concatenate([p["next_sentence_labels"] for p in loaded])
    return arrays


def gluonnlp_vocab(path: Path, order: list[str]) -> Path:
    """A vocabulary as gluon-nlp's ``BERTVocab.to_json`` saves it."""
    path.write_text(json.dumps({"idx_to_token": order, "unknown_token": "[UNK]",
                                "token_to_idx": {t: i for i, t in enumerate(order)}}))  # fmt: skip
    return path


def test_gluonnlp_files_hold_the_same_instances_in_its_vocabulary_ids(
    corpus: tuple[Path, Path], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    words = corpus[1].read_text().splitlines()
    hdf5 = tmp_path / "hdf5"
    make("bert-hdf5", corpus, hdf5, "--shards", "3")
    # gluon-nlp's vocabulary JSON in vocab.txt's order: the same ids, so the same arrays
    same = (corpus[0], gluonnlp_vocab(tmp_path / "same.vocab", words))
    out = tmp_path / "gluonnlp"
    make("bert-gluonnlp", same, out, "--shards", "3")
    assert sorted(read_manifest(out)["files"]) == [
        "eval/part-00002.npz", "train/part-00000.npz", "train/part-00001.npz"
    ]  # fmt: skip
    both = {name: np.concatenate([read_gluonnlp(out)[name], read_gluonnlp(out, "eval")[name]])
            for name in read_gluonnlp(out)}  # fmt: skip
    check_instances(both, corpus)
    assert rows(both) == rows(read_hdf5(hdf5))
    # in an order of its own (as gluon-nlp's are): ids in that order, not vocab.txt's
    order = [*SPECIAL[2:], "[PAD]", *reversed([w for w in words if w not in SPECIAL])]
    own = (corpus[0], gluonnlp_vocab(tmp_path / "own.vocab", order))
    make("bert-gluonnlp", own, tmp_path / "json", "--shards", "3")
    check_instances(read_gluonnlp(tmp_path / "json"), corpus, words=order)
    assert read_manifest(tmp_path / "json")["source"]["vocab"]["kind"] == "gluonnlp-json"
    # a vocab.txt is refused: its line numbers would be other tokens in gluon-nlp's model
    argv = ["data", "bert-gluonnlp", str(corpus[0]), str(corpus[1]), str(tmp_path / "no"), *SMALL]
    assert main(argv) == 2
    assert "vocab.txt: (file): is a vocab.txt: gluon-nlp's run reads ids" in capsys.readouterr().err


def test_the_kit_s_own_shards_read_back_with_its_pytorch_reader(
    corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    """``bert-kit``: the kit's own BERT format (PyTorch/README.md), read by the script's own
    reader and dataset, holding the same instances as the hdf5 shards, -1 where a label pads."""
    from PyTorch.benchmark.data import BertShardDataset, read_bert_shards

    hdf5 = tmp_path / "hdf5"
    make("bert-hdf5", corpus, hdf5)
    out = tmp_path / "kit"
    make("bert-kit", corpus, out)
    assert sorted(read_manifest(out)["files"]) == [
        "shard_00000.npz", "shard_00001.npz", "vocab.txt"
    ]  # fmt: skip
    arrays, meta = read_bert_shards(out)
    assert meta["seq_len"] == 32 and meta["max_predictions"] == 5
    assert meta["vocab_size"] == len(corpus[1].read_text().splitlines())
    assert {name: str(a.dtype) for name, a in arrays.items()} == {
        "input_ids": "int32", "segment_ids": "int8", "input_mask": "int8",
        "masked_lm_positions": "int32", "masked_lm_ids": "int32", "next_sentence_labels": "int8",
    }  # fmt: skip
    padded = arrays["masked_lm_ids"] == -1
    assert padded.any() and not (arrays["masked_lm_positions"][padded]).any()
    check_instances({**arrays, "masked_lm_ids": np.where(padded, 0, arrays["masked_lm_ids"])},
                    corpus)  # fmt: skip
    reference = read_hdf5(hdf5)
    # hdf5 pads positions with 0 ([CLS], never masked): the kit's labels are -1 there
    labels = np.where(reference["masked_lm_positions"] > 0, reference["masked_lm_ids"], -1)
    assert rows(arrays) == rows({**reference, "masked_lm_ids": labels})
    options = {"seq_len": 32, "max_predictions": 5, "vocab_size": meta["vocab_size"]}
    batch = BertShardDataset(str(out), options)[[0, 1, 2]]
    assert tuple(batch["input_ids"].shape) == (3, 32)
    with pytest.raises(ValueError, match="seq_len"):
        BertShardDataset(str(out), {**options, "seq_len": 64})


def test_paddle_lines_parse_as_its_reader_reads_them(
    corpus: tuple[Path, Path], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    """Lines ``token_ids;sent_ids;pos_ids;label``; train only pairs whose B follows A (the
    reader makes negatives by splitting at id 2), unmasked; the same pairs as the hdf5 set's."""
    words = corpus[1].read_text().splitlines()
    order = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]",
             *[w for w in words if w not in SPECIAL], "[unused0]"]  # fmt: skip
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(order) + "\n")  # [SEP] on line 3, as the reader needs
    out = tmp_path / "paddle"
    argv = ["data", "bert-paddle", str(corpus[0]), str(vocab), str(out), *SMALL, "--shards", "3"]
    assert main(argv) == 0
    assert (out / "vocab.txt").read_bytes() == vocab.read_bytes()
    assert {"bert_config.json", "vocab.txt", "validation/part-00002.gz"} <= set(
        read_manifest(out)["files"]
    )
    pairs: dict[str, list[tuple[str, int]]] = {"train": [], "validation": []}
    for split in pairs:
        for path in sorted((out / split).iterdir()):
            with gzip.open(path, "rb") as stream:
                for line in stream:
                    token_ids, sent_ids, pos_ids, label = line.strip().decode().split(";")
                    ids = [int(t) for t in token_ids.split(" ")]
                    assert [int(t) for t in pos_ids.split(" ")] == list(range(len(ids)))
                    assert len(sent_ids.split(" ")) == len(ids) and ids.index(2) > 1
                    pairs[split].append((" ".join(order[i] for i in ids), int(label)))
    assert {label for _text, label in pairs["train"]} == {1}
    assert {label for _text, label in pairs["validation"]} == {0, 1}
    hdf5 = tmp_path / "hdf5"
    make("bert-hdf5", corpus, hdf5, "--shards", "3")
    expected = []
    for path in sorted(hdf5.glob("*training*"))[:2]:
        arrays = read_hdf5_file(path)
        for row, ids in enumerate(arrays["input_ids"]):
            if arrays["next_sentence_labels"][row] == 0:
                tokens = [words[i] for i in ids[: arrays["input_mask"][row].sum()]]
                count = int((arrays["masked_lm_positions"][row] > 0).sum())
                positions = arrays["masked_lm_positions"][row, :count]
                for position, label in zip(positions, arrays["masked_lm_ids"][row], strict=False):
                    tokens[position] = words[label]
                expected.append(" ".join(tokens))
    assert sorted(text for text, _label in pairs["train"]) == sorted(expected)
    # a vocabulary with [SEP] elsewhere is refused before anything is written
    argv = ["data", "bert-paddle", str(corpus[0]), str(corpus[1]), str(tmp_path / "no"), *SMALL]
    assert main(argv) == 2
    assert "vocab.txt: [SEP]: is id 4" in capsys.readouterr().err


UPSTREAM = Path(__file__).parent / "fixtures" / "upstream" / "ngc-pytorch" / "bert-data"


def test_instances_are_those_of_deeplearningexamples_own_script() -> None:
    """The instances DeepLearningExamples' create_pretraining_data.py (e5428044) made of a
    corpus with accents, punctuation and word pieces (recorded by capture.py beside it), made
    again here: the same tokens, segments, labels and masks, in the same order."""
    recorded = json.loads((UPSTREAM / "instances.json").read_text())
    p = dict(recorded["parameters"])
    params = Parameters(**p)
    corpus = scan_corpus(UPSTREAM / "corpus.txt")
    vocab = Vocabulary(UPSTREAM / "vocab.txt", lower_case=True)
    ours = shard_instances(corpus, (0, corpus.documents), vocab, params)
    assert [asdict(i) for i in ours] == recorded["instances"]


def test_wordpiece_lower_cases_and_splits(corpus: tuple[Path, Path]) -> None:
    vocab = Vocabulary(corpus[1], lower_case=True)
    assert vocab.tokenize("The fox Sings, zebra.") == ["the", "fox", "sing", "##s", "[UNK]",
                                                        "[UNK]", "."]  # fmt: skip
    # BERT's word limit is 200 characters: a 197-character word is still split in pieces
    assert vocab.tokenize("sing" + "s" * 193) == ["sing", *["##s"] * 193]
    assert vocab.tokenize("sing" + "s" * 197) == ["[UNK]"]
    assert Vocabulary(corpus[1], lower_case=False).tokenize("The fox") == ["[UNK]", "fox"]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing vocab", "vocab.txt: (file): does not exist"),
        ("vocab without [MASK]", "vocab.txt: [MASK]: is not in the vocabulary"),
        ("JSON vocab without tokens", "vocab.txt: idx_to_token: is not a list of tokens"),
        ("empty corpus", "corpus.txt: (file): holds no text"),
        ("one document", "corpus.txt: documents: 1 document(s) for 2 shard(s)"),
        ("not UTF-8", "corpus.txt: line 2: is not UTF-8"),
        ("a FIFO", "corpus.txt: (file): is not a regular file"),
        ("no corpus", "corpus.txt: (file): does not exist"),
        ("sequence too short", "--max-seq-length: must be 5 to 512"),
    ],
)
def test_bad_input_is_refused_naming_file_and_field(
    case: str, message: str, corpus: tuple[Path, Path], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    text, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    vocab.write_bytes(corpus[1].read_bytes())
    text.write_bytes(corpus[0].read_bytes())
    extra: list[str] = []
    if case == "missing vocab":
        vocab.unlink()
    elif case == "vocab without [MASK]":
        vocab.write_text(vocab.read_text().replace("[MASK]\n", ""))
    elif case == "JSON vocab without tokens":
        vocab.write_text('{"token_to_idx": {"[CLS]": 0}}')
    elif case == "empty corpus":
        text.write_text("\n\n")
    elif case == "one document":
        text.write_text("the fox .\nthe dog .\n")
    elif case == "not UTF-8":
        text.write_bytes(b"the fox .\n\xff\xfe dog\n")
    elif case == "a FIFO":
        text.unlink()
        os.mkfifo(text)
    elif case == "no corpus":
        text.unlink()
    elif case == "sequence too short":
        extra = ["--max-seq-length", "4"]
    argv = ["data", "bert-hdf5", str(text), str(vocab), str(tmp_path / "out"), *SMALL, *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
