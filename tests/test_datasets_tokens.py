"""``dlperf data tokens`` (driver/datasets/tokens.py) and the token file's reader in
PyTorch/benchmark/data.py: a corpus tokenized byte-level and by a real ``tokenizers`` BPE
tokenizer trained here, its manifest, a real Llama run on it through the driver (the manifest's
SHA-256 in its provenance), and bad token files refused with the file and the first bad
offset."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from driver.core.runner import run_cases
from driver.core.summary import summarize
from driver.datasets.manifest import dataset_sha256
from driver.frontend.cli import main
from driver.model.case import Case, Topology
from driver.model.results import Session
from driver.runtimes.local import LocalRuntime
from PyTorch.benchmark.data import TokenFileError, open_token_file
from tests.real_frameworks import framework_env, run_script

CORPUS = """Benchmarks measure training throughput in tokens per second.
A decoder predicts each next token from the tokens before it. Ünïcödé stays whole.
"""


@pytest.fixture
def corpus(tmp_path: Path) -> list[Path]:
    paths = []
    for index in range(2):
        path = tmp_path / f"doc{index}.txt"
        path.write_text(CORPUS * (20 + index), encoding="utf-8")
        paths.append(path)
    return paths


def test_byte_level_token_file_and_its_manifest(tmp_path: Path, corpus: list[Path]) -> None:
    out = tmp_path / "tokens"
    assert main(["data", "tokens", *map(str, corpus), "--out", str(out)]) == 0
    tokens = np.fromfile(out / "tokens.bin", dtype="<u4")
    expected: list[int] = []
    for path in corpus:  # every document's UTF-8 bytes, then the end-of-text id 256
        expected += [*path.read_bytes(), 256]
    assert tokens.tolist() == expected
    manifest_bytes = (out / "dlperf-dataset.json").read_bytes()
    manifest = json.loads(manifest_bytes)
    assert manifest["format"] == "tokens" and manifest["schema"] == 1
    entry = manifest["files"]["tokens.bin"]
    assert entry["sha256"] == hashlib.sha256((out / "tokens.bin").read_bytes()).hexdigest()
    assert entry["bytes"] == 4 * len(expected)
    source = manifest["source"]
    assert (source["vocab_size"], source["eos_id"], source["tokens"]) == (257, 256, len(expected))
    assert source["inputs"][0]["sha256"] == hashlib.sha256(corpus[0].read_bytes()).hexdigest()


def test_a_tokenizers_json_file_encodes_every_document_then_its_end_of_text(
    tmp_path: Path, corpus: list[Path]
) -> None:
    """A byte-pair tokenizer trained on the corpus with the tokenizers package, saved as the
    tokenizer.json a user would give."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<|end_of_text|>"], show_progress=False
    )
    bpe.train([str(path) for path in corpus], trainer)
    tokenizer_json = tmp_path / "tokenizer.json"
    bpe.save(str(tokenizer_json))
    eos = bpe.token_to_id("<|end_of_text|>")
    out = tmp_path / "tokens"
    argv = ["data", "tokens", *map(str, corpus), "--out", str(out)]
    assert main([*argv, "--tokenizer", str(tokenizer_json)]) == 0
    expected: list[int] = []
    for path in corpus:  # the tokenizer's own ids of each document, then its end of text
        expected += [*bpe.encode(path.read_text(encoding="utf-8")).ids, eos]
    tokens = np.fromfile(out / "tokens.bin", dtype="<u4")
    assert tokens.tolist() == expected and len(expected) < sum(p.stat().st_size for p in corpus)
    source = json.loads((out / "dlperf-dataset.json").read_text())["source"]
    assert source["tokenizer"] == {
        "kind": "tokenizers-json",
        "name": "tokenizer.json",
        "sha256": hashlib.sha256(tokenizer_json.read_bytes()).hexdigest(),
    }
    assert (source["vocab_size"], source["eos_id"]) == (bpe.get_vocab_size(), eos)
    # a file that is not a tokenizer is refused, naming it
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["data", "tokens", str(corpus[0]), "--out", str(tmp_path / "o"),
                 "--tokenizer", str(bad)]) == 2  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_missing_tokenizer_file_is_refused(tmp_path: Path, corpus: list[Path], capsys) -> None:
    argv = ["data", "tokens", str(corpus[0]), "--out", str(tmp_path / "o")]
    assert main([*argv, "--tokenizer", str(tmp_path / "none.json")]) == 2
    assert "--tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def write_tokens(path: Path, values: list[int], extra: bytes = b"") -> Path:
    path.write_bytes(np.asarray(values, dtype="<u4").tobytes() + extra)
    return path


@pytest.mark.parametrize(
    ("values", "extra", "vocab", "needed", "words"),
    [
        ([1, 2, 3, 600, 4, 700], b"", 512, 4, "token 3 (byte offset 12) is 600"),
        ([1, 2, 3, 4], b"\x01\x02", 512, 2, "from byte offset 16"),
        ([1, 2, 3], b"", 512, 10, "3 tokens, fewer than the 10"),
    ],
)
def test_bad_token_files_name_the_file_and_the_first_bad_offset(
    tmp_path: Path, values: list[int], extra: bytes, vocab: int, needed: int, words: str
) -> None:
    path = write_tokens(tmp_path / "tokens.bin", values, extra)
    with pytest.raises(TokenFileError) as caught:
        open_token_file(path, vocab, needed)
    assert str(path) in str(caught.value) and words in str(caught.value)


def record_logs(session: Session) -> str:
    return "".join(path.read_text() for path in session.root.rglob("node*.log"))


def test_llama_trains_on_the_token_file(tmp_path: Path, corpus: list[Path]) -> None:
    python = framework_env("pytorch")
    out = tmp_path / "tokens"
    assert main(["data", "tokens", *map(str, corpus), "--out", str(out)]) == 0
    # through the driver: the repeat's provenance names the token set by its manifest's SHA-256
    case = Case(
        model="llama", framework="pytorch", topology=Topology.parse("1n1g"), batch_size=2,
        precision="fp32", dataset="real", xla=False, warmup_steps=1, measured_steps=2,
        total_steps=3, repeats=1, timeout_s=240.0, data_dir=str(out),
        options={"llama_size": "llama-tiny", "seq_len": 32}, profile="test",
    )  # fmt: skip
    session = Session.open(tmp_path / "session")
    assert run_cases([case], session, LocalRuntime(), printer=lambda _line: None).ok
    [(_case, record, _path)] = list(session.records())
    manifest = hashlib.sha256((out / "dlperf-dataset.json").read_bytes()).hexdigest()
    assert record.extra["dataset_sha256"] == manifest == dataset_sha256(out)
    (summary,) = summarize([(case, record)])
    assert summary.dataset_sha256 == manifest
    steps = [json.loads(line[line.index("{") :]) for line in (record_logs(session)).splitlines()
             if '"dlperf": "step"' in line]  # fmt: skip
    assert [s["step"] for s in steps] == [1, 2, 3]
    # the script alone, as a launcher starts it
    args = ["--model", "llama", "--batch-size", "2", "--total-steps", "3", "--warmup-steps", "1",
            "--dataset", "real", "--data-dir", str(out),
            "--option", "llama_size=llama-tiny", "--option", "seq_len=32"]  # fmt: skip
    # an id past llama-tiny's vocabulary of 512 is refused before any step
    write_tokens(out / "tokens.bin", [5] * 100 + [513] + [5] * 100)
    done = run_script(python, "PyTorch/benchmark/train.py", args)
    assert done.returncode == 2
    assert "token 100 (byte offset 400) is 513" in done.stderr
    assert '"step"' not in done.stdout


# --- corpus scale (issue #49) ----------------------------------------------------------------


def megatron_read(prefix: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """Megatron's indexed data set read as megatron-core 0.14.0's _IndexReader reads it: the
    header, then lengths (int32), byte offsets (int64), document indices (int64)."""
    index = (prefix.parent / f"{prefix.name}.idx").read_bytes()
    assert index[:9] == b"MMIDIDX\x00\x00"
    version, code = int.from_bytes(index[9:17], "little"), index[17]
    sequences = int.from_bytes(index[18:26], "little")
    documents = int.from_bytes(index[26:34], "little")
    assert version == 1 and documents == sequences + 1
    dtype = {8: np.uint16, 4: np.int32}[code]
    at = 34
    lengths = np.frombuffer(index, np.int32, sequences, at)
    pointers = np.frombuffer(index, np.int64, sequences, at + 4 * sequences)
    doc_index = np.frombuffer(index, np.int64, documents, at + 12 * sequences)
    assert doc_index.tolist() == list(range(documents)) and len(index) == at + 20 * sequences + 8
    data = np.fromfile(prefix.parent / f"{prefix.name}.bin", dtype=dtype)
    itemsize = np.dtype(dtype).itemsize
    docs = [data[p // itemsize : p // itemsize + n] for p, n in zip(pointers, lengths, strict=True)]
    return lengths, docs


def test_a_corpus_of_100000_documents_streams_into_both_formats(tmp_path: Path) -> None:
    """A folder of JSON lines (one plain, one gzipped), a parquet file and a text file: 100,003
    documents, tokenized as a stream into tokens.bin and Megatron's .bin/.idx, the same ids in
    both; the manifest names the inputs' identity, not 100,003 documents."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    corpus = tmp_path / "corpus"
    (corpus / "shard-b").mkdir(parents=True)
    texts = [f"document {i}: tokens per second, {'x' * (i % 37)}" for i in range(100_000)]
    (corpus / "shard-a.jsonl").write_text(
        "".join(json.dumps({"text": t, "url": "u"}) + "\n" for t in texts[:60_000])
    )
    with gzip.open(corpus / "shard-b" / "part.jsonl.gz", "wt", encoding="utf-8") as out:
        out.writelines(json.dumps({"text": t}) + "\n" for t in texts[60_000:])
    pq.write_table(pa.table({"text": ["ünïcödé", "parquet row"]}), corpus / "shard-c.parquet")
    single = tmp_path / "one.txt"
    single.write_text("one document\n\nin two paragraphs")
    out = tmp_path / "tokens"
    assert main(["data", "tokens", str(corpus), str(single), "--out", str(out)]) == 0
    expected = [*texts, "ünïcödé", "parquet row", single.read_text()]
    flat = np.fromfile(out / "tokens.bin", dtype="<u4")
    lengths, docs = megatron_read(out / "megatron_text_document")
    assert len(docs) == len(expected) == 100_003
    for index in (0, 59_999, 60_000, 99_999, 100_000, 100_002):  # each input's first and last
        assert docs[index].tolist() == [*expected[index].encode(), 256], index
    assert int(lengths.sum()) == len(flat) and np.array_equal(np.concatenate(docs), flat)
    manifest = json.loads((out / "dlperf-dataset.json").read_text())
    source = manifest["source"]
    assert (source["documents"], source["input_files"]) == (100_003, 4)
    assert source["megatron"] == {"prefix": "megatron_text_document", "dtype": "uint16"}
    assert len(source["inputs"]) == 4 and len(json.dumps(manifest)) < 10_000
    assert set(manifest["files"]) == {"tokens.bin", "megatron_text_document.bin",
                                      "megatron_text_document.idx"}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("bad.jsonl", '{"text": "a"}\n{"body": "b"}\n', "line 2: has no 'text' string"),
        ("bad.jsonl", '{"text": "a"}\nnot json\n', "line 2: not JSON"),
        ("cut.jsonl.gz", None, "cannot be read to its end"),
        ("notes.csv", "a,b\n", "is of no kind the command reads"),
    ],
)
def test_a_bad_corpus_file_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, name: str, content: str | None, fragment: str
) -> None:
    import gzip

    path = tmp_path / name
    if content is None:  # a gzip stream cut in the middle
        whole = gzip.compress(b"".join(b'{"text": "%d"}\n' % (i * 7919) for i in range(5000)))
        path.write_bytes(whole[: len(whole) // 2])
    else:
        path.write_text(content)
    out = tmp_path / "tokens"
    assert main(["data", "tokens", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and fragment in err and "Traceback" not in err
    assert not (out / "tokens.bin").exists()  # nothing half-written is left as the set


def test_the_kits_own_llama_selects_real_data_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """docs/llama.md's real-data command: the matrix lists synthetic Llama cases only, and
    `--dataset real` was refused ("in no selected matrix"); with --data-dir the kit's own
    scripts' cases run on it. Without --data-dir the refusal names the flag to add."""
    argv = ["run", "--framework", "pytorch", "--model", "llama", "--dataset", "real", "--option",
            "llama_size=llama-tiny", "--option", "seq_len=256", "--dry-run"]  # fmt: skip
    assert main([*argv, "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "llama/pytorch/1n1g/bs2/fp32/real/small" in out and "/synthetic/" not in out
    assert "--dataset real" in out and f"--data-dir {tmp_path}" in out
    assert main(argv) == 2
    assert "--dataset: 'real' needs --data-dir" in capsys.readouterr().err
