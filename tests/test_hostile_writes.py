"""Hostile corpus: where the kit writes is a file, a dangling symlink, a read-only mount or a
full disk, for every command that writes (report, release, import, import-logs, run's session).

Each case runs the real CLI in a subprocess against a real fault (a tmpfs filled to the last
byte, a read-only bind mount: tests/fs_faults.py) and must end in exit 2 with one line that
names the path: never a traceback, never a silent success. Nothing already measured is lost:
the session or version a failed write touched is still whole afterwards.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.fs_faults import fill, read_only, small_tmpfs
from tests.hostile import CLEAR, HostileCase, cli_subprocess, run_corpus
from tests.synth import cached_session
from tests.test_hostile_records import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
GLUON = FIXTURES / "upstream" / "real" / "gluon-nlp" / "bert.log"
PUBLISHED = FIXTURES / "published" / "dlperf-v1.0-resnet50.yaml"


def import_logs_argv(results: Path) -> list[str]:
    return ["import-logs", "--source", "gluon-nlp", "--logs", str(GLUON), "--model", "bert",
            "--batch", "4", "--dataset", "synthetic", "--warmup-steps", "9",
            "--measured-steps", "20", "--results", str(results), "--session", "s"]  # fmt: skip


def commands(session: Path, target: Path) -> dict[str, list[str]]:
    """Every writing command, writing at ``target`` (a folder the fault makes unwritable)."""
    return {
        "report --out": ["report", str(session), "--out", str(target / "out")],
        "release --reports": ["release", "v0.1", str(session), "--reports", str(target),
                              "--no-flops"],
        "import --out": ["import", str(PUBLISHED), "--out", str(target / "out")],
        "import-logs --results": import_logs_argv(target),
    }  # fmt: skip


Fault = Callable[[Path, ExitStack], Path]  # makes the fault under a scratch folder; the target


def a_file(scratch: Path, _stack: ExitStack) -> Path:
    (scratch / "target").write_text("a file where a folder should be\n")
    return scratch / "target"


def a_dangling_symlink(scratch: Path, _stack: ExitStack) -> Path:
    (scratch / "target").symlink_to(scratch / "nowhere")
    return scratch / "target"


def read_only_mount(scratch: Path, stack: ExitStack) -> Path:
    (scratch / "target").mkdir()
    return stack.enter_context(read_only(scratch / "target"))


def full_disk(scratch: Path, stack: ExitStack) -> Path:
    disk = stack.enter_context(small_tmpfs(scratch / "target", size="512k"))
    fill(disk)
    return disk


FAULTS: dict[str, tuple[Fault, str]] = {  # fault -> (maker, what the message must say)
    "a file": (a_file, "cannot be written"),
    "a dangling symlink": (a_dangling_symlink, "cannot be written"),
    "a read-only mount": (read_only_mount, "read-only"),
    "a full disk": (full_disk, "No space left"),
}


def cases(session: Path, scratch: Path, stack: ExitStack) -> Iterator[HostileCase]:
    for fault_name, (make, says) in FAULTS.items():
        for index, (command, _argv) in enumerate(commands(session, scratch).items()):
            where = scratch / f"{fault_name.replace(' ', '-')}-{index}"
            where.mkdir(parents=True)
            target = make(where, stack)
            argv = commands(session, target)[command]
            yield HostileCase(
                f"{command} into {fault_name}",
                lambda argv=argv: cli_subprocess(argv),
                (str(target), says),
            )


@pytest.mark.slow  # 25 s on the 2-core AVX2 EPYC, in make test
def test_every_writing_command_refuses_an_unwritable_place_clearly(tmp_path: Path) -> None:
    session = tmp_path / "session"
    shutil.copytree(cached_session(), session)
    before = sorted(p.relative_to(session) for p in session.rglob("*"))
    with ExitStack() as stack:
        corpus = list(cases(session, tmp_path / "faults", stack))
        counts = run_corpus(corpus)
        kinds = counts.print_summary("writes")
    assert kinds[CLEAR] == len(corpus) == 16, [v.detail for v in counts.failures()]
    # nothing measured was lost or changed by a failed write
    assert sorted(p.relative_to(session) for p in session.rglob("*")) == before


def test_a_full_disk_during_release_leaves_no_work_folder(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", size="96k") as disk:
        code, text = run_cli(["release", "v0.1", str(cached_session()), "--reports",
                              str(disk), "--no-flops"])  # fmt: skip
        assert code == 2 and "No space left" in text, text
        assert [p.name for p in disk.iterdir()] == []


BERT_VOCAB = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "the", "cat", "sat", "on", "mat", "."]


@pytest.mark.parametrize(
    ("fmt", "size"),
    [
        ("bert-hdf5", "24k"),
        ("bert-paddle", "24k"),
        # TFRecords are written by TensorFlow's environment: not in the fast tier's reach
        pytest.param("bert-tfrecord", "1700k", marks=pytest.mark.frameworks),
    ],
)
def test_a_full_disk_during_bert_data_says_so_and_leaves_no_partial_shard(
    tmp_path: Path, fmt: str, size: str
) -> None:
    # Room for the job note but not for a shard: the shard's own write meets the full disk
    # (h5py reported it as a RuntimeError from its C library and the process then crashed).
    # bert-tfrecord: room for both shards' arrays handed to TensorFlow (~0.5 MB each), not for
    # its records; the hand-over files stayed behind.
    rng = random.Random(1)
    words = BERT_VOCAB[5:10]
    sentences = [" ".join(rng.choice(words) for _ in range(8)) + " ." for _ in range(1200)]
    documents = ["\n".join(sentences[k : k + 3]) for k in range(0, len(sentences), 3)]
    corpus, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    corpus.write_text("\n\n".join(documents) + "\n")
    vocab.write_text("\n".join(BERT_VOCAB) + "\n")
    with small_tmpfs(tmp_path / "disk", size=size) as disk:
        argv = ["data", fmt, str(corpus), str(vocab), str(disk / "out"), "--shards", "2",
                "--max-seq-length", "32", "--max-predictions-per-seq", "5"]  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "driver.frontend.cli", *argv],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2 and "No space left" in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert f"error: {disk / 'out'}" in done.stderr  # the path, not errno's words alone
        # whole shards stay for a resume; nothing half-written, and no manifest over them
        left = {p.name for p in (disk / "out").rglob("*") if p.is_file()}
        assert ".dlperf-bert-job.json" in left and "dlperf-dataset.json" not in left, left
        assert not [name for name in left if ".partial" in name or ".dlperf-tmp-" in name], left
        assert not [name for name in left if name.startswith(".shard-")], left  # the hand-over


def test_a_full_disk_during_data_tokens_names_one_file_and_leaves_no_output(
    tmp_path: Path,
) -> None:
    """The token file and Megatron's data set are streamed into atomic files nested in one
    another: a full disk is said once, naming the file that met it (the outer file wrapped the
    inner one's error in its own before), and none of the outputs is left half-written."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"text": "document {i} {"x" * 40}"}}\n' for i in range(5000)))
    with small_tmpfs(tmp_path / "disk", size="64k") as disk:
        done = subprocess.run([sys.executable, "-m", "driver.frontend.cli", "data", "tokens",
                               str(corpus), "--out", str(disk / "out")],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2 and "No space left" in done.stderr, done.stderr
        assert done.stderr.count("cannot be written") == 1 and "Traceback" not in done.stderr
        assert sorted(p.name for p in (disk / "out").iterdir()) == [".dlperf-job.json"]
