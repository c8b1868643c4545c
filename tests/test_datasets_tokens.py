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
    assert source["texts"][0]["sha256"] == hashlib.sha256(corpus[0].read_bytes()).hexdigest()


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
