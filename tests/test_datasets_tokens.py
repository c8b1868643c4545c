"""``dlperf data tokens`` (driver/datasets/tokens.py) and the token file's reader in
PyTorch/benchmark/data.py: a corpus tokenized byte-level, its manifest, a real Llama run on
it, and bad token files refused with the file and the first bad offset."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from driver.frontend.cli import main
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


def test_llama_trains_on_the_token_file(tmp_path: Path, corpus: list[Path]) -> None:
    python = framework_env("pytorch")
    out = tmp_path / "tokens"
    assert main(["data", "tokens", *map(str, corpus), "--out", str(out)]) == 0
    args = ["--model", "llama", "--batch-size", "2", "--total-steps", "3", "--warmup-steps", "1",
            "--dataset", "real", "--data-dir", str(out),
            "--option", "llama_size=llama-tiny", "--option", "seq_len=32"]  # fmt: skip
    done = run_script(python, "PyTorch/benchmark/train.py", args)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [json.loads(line) for line in done.stdout.splitlines() if '"step"' in line]
    assert [s["step"] for s in steps] == [1, 2, 3]
    # an id past llama-tiny's vocabulary of 512 is refused before any step
    write_tokens(out / "tokens.bin", [5] * 100 + [513] + [5] * 100)
    done = run_script(python, "PyTorch/benchmark/train.py", args)
    assert done.returncode == 2
    assert "token 100 (byte offset 400) is 513" in done.stderr
    assert '"step"' not in done.stdout
