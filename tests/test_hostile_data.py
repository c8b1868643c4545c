"""Hostile corpus: ``dlperf data`` fed forged manifests, symlinks, FIFOs, folders of another set,
names its readers would split, absurd counts and a full disk (issue #48, item 3).

Every case must end in exit 2 with one line naming the file or option: never a traceback, a
hang or a silent success, and nothing written outside the output folder given.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from driver.datasets.manifest import JOB, MANIFEST, manifest_bytes
from driver.files import sha256_file
from driver.frontend.cli import main
from tests.fs_faults import small_tmpfs
from tests.hostile import refused

WNID = "n01440764"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A toy ImageNet: two train and one val JPEG of one class."""
    root = tmp_path / "imagenet"
    for split, count in (("train", 2), ("val", 1)):
        folder = root / split / WNID
        folder.mkdir(parents=True)
        for k in range(count):
            Image.new("RGB", (16 + k, 16), (k, 0, 0)).save(folder / f"{WNID}_{k}.JPEG")
    return root


def cli(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess: a read that blocks on a FIFO fails the test by its timeout."""
    return subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", *argv],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def forged_tfrecord_set(folder: Path, names: dict[str, bytes]) -> None:
    """A folder whose manifest says ``imagenet-tfrecord`` and lists ``names`` (written where
    they are plain names; the entries' hashes those of the bytes given)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, data in names.items():
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / MANIFEST).write_bytes(manifest_bytes("imagenet-tfrecord", files, {}))


@pytest.mark.parametrize("name", ["../escaped", "/ABSOLUTE/escaped", "a/../../escaped"])
def test_dali_index_refuses_a_manifest_name_leading_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    if name.startswith("/ABSOLUTE"):
        name = str(tmp_path / "abs" / "escaped")
    source = tmp_path / "set" / "tf"
    forged_tfrecord_set(source, {name: b""})
    refused(["data", "dali-index", str(source), str(tmp_path / "idx")], capsys, MANIFEST, "files")
    written = list(tmp_path.rglob("*.idx"))
    assert written == [], written  # nothing written, inside the folder or out of it


def test_dali_index_refuses_a_symlink_leading_out_of_the_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "tf"
    forged_tfrecord_set(source, {"train-00000-of-00001": b""})
    (tmp_path / "secret").write_bytes(b"")
    (source / "train-00000-of-00001").symlink_to(tmp_path / "secret")
    refused(
        ["data", "dali-index", str(source), str(tmp_path / "idx")], capsys,
        "train-00000-of-00001", "symlink leading out",
    )  # fmt: skip
    assert not (tmp_path / "idx").exists()


def test_dali_index_verifies_the_tfrecords_hashes_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "tf"
    record = (4).to_bytes(8, "little") + b"\0" * 4 + b"data" + b"\0" * 4
    forged_tfrecord_set(source, {"train-00000-of-00001": record})
    (source / "train-00000-of-00001").write_bytes(record[:-1] + b"\1")  # changed since made
    refused(
        ["data", "dali-index", str(source), str(tmp_path / "idx")], capsys,
        "train-00000-of-00001", "sha256",
    )  # fmt: skip
    assert not list((tmp_path).rglob("*.idx"))


def test_dali_index_refuses_a_fifo_in_the_set_without_hanging(tmp_path: Path) -> None:
    source = tmp_path / "tf"
    forged_tfrecord_set(source, {"train-00000-of-00001": b""})
    os.mkfifo(source / "train-00000-of-00001")
    done = cli(["data", "dali-index", str(source), str(tmp_path / "idx")])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "train-00000-of-00001" in done.stderr and "not a regular file" in done.stderr


def test_raw_refuses_a_symlinked_jpeg_leading_out_and_follows_one_inside(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "elsewhere.JPEG").write_bytes((tree / "val" / WNID / f"{WNID}_0.JPEG").read_bytes())
    link = tree / "train" / WNID / "linked.JPEG"
    link.symlink_to(tmp_path / "elsewhere.JPEG")
    out = tmp_path / "raw"
    refused(["data", "raw", str(tree), str(out)], capsys, "linked.JPEG", f"leading out of {tree}")
    assert not out.exists() or not list(out.rglob("*.JPEG"))
    # a link inside the tree is followed: the output holds the image, not a link
    link.unlink()
    link.symlink_to(f"{WNID}_0.JPEG")
    assert main(["data", "raw", str(tree), str(out)]) == 0
    placed = out / "train" / WNID / "linked.JPEG"
    assert not placed.is_symlink() and placed.read_bytes() == link.read_bytes()


def test_raw_refuses_a_class_folder_linked_out_of_the_tree(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    (tree / "val" / WNID).rename(other)
    (tree / "val" / WNID).symlink_to(other)
    refused(["data", "raw", str(tree), str(tmp_path / "raw")], capsys, WNID, "leading out")


def test_raw_refuses_a_fifo_in_the_tree_without_hanging(tree: Path, tmp_path: Path) -> None:
    os.mkfifo(tree / "train" / WNID / "pipe.JPEG")
    for fmt in ("raw", "paddle-lists"):
        done = cli(["data", fmt, str(tree), str(tmp_path / fmt)])
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "pipe.JPEG" in done.stderr and "not a regular file" in done.stderr


def test_an_output_folder_holding_another_set_is_refused_not_mixed(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["data", "raw", str(tree), str(out)]) == 0
    capsys.readouterr()
    manifest = (out / MANIFEST).read_bytes()
    # another format into it
    refused(["data", "paddle-lists", str(tree), str(out)], capsys, JOB, "imagenet-raw")
    # another source (one more image) into it
    Image.new("RGB", (9, 9)).save(tree / "train" / WNID / "more.JPEG")
    refused(["data", "raw", str(tree), str(out)], capsys, JOB, "another source")
    assert (out / MANIFEST).read_bytes() == manifest
    assert not (out / "train" / WNID / "more.JPEG").exists()
    # a folder made by an older kit (a manifest, no note) is held to its manifest
    (out / JOB).unlink()
    refused(["data", "paddle-lists", str(tree), str(out)], capsys, MANIFEST, "imagenet-raw")
    # a folder of the user's own files is no output folder
    mine = tmp_path / "home"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work\n")
    refused(["data", "raw", str(tree), str(mine)], capsys, str(mine), "thesis.tex")
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]


def test_tokens_refuse_a_folder_holding_another_set_and_a_fifo_text(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "raw"
    assert main(["data", "raw", str(tree), str(out)]) == 0
    capsys.readouterr()
    text = tmp_path / "doc.txt"
    text.write_text("a document\n")
    refused(["data", "tokens", str(text), "--out", str(out)], capsys, "imagenet-raw")
    assert not (out / "tokens.bin").exists()
    os.mkfifo(tmp_path / "pipe.txt")
    done = cli(["data", "tokens", str(tmp_path / "pipe.txt"), "--out", str(tmp_path / "t")])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "pipe.txt" in done.stderr and "not a regular file" in done.stderr


def test_paddle_lists_refuse_a_name_the_reader_would_split(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree / "val" / WNID / f"{WNID}_0.JPEG").rename(tree / "val" / WNID / "two words.JPEG")
    out = tmp_path / "paddle"
    refused(["data", "paddle-lists", str(tree), str(out)], capsys, "two words.JPEG", "whitespace")
    assert not out.exists()
    (tree / "val" / WNID / "two words.JPEG").rename(tree / "val" / WNID / "line\nbreak.JPEG")
    for fmt in ("paddle-lists", "raw"):  # no manifest could name it either
        refused(["data", fmt, str(tree), str(out)], capsys, "'line\\nbreak.JPEG'")
        assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["tfrecord", "--train-shards", "0"], "--train-shards"),
        (["tfrecord", "--val-shards", "-3"], "--val-shards"),
        (["ofrecord", "--train-shards", "1000000000"], "--train-shards"),
        (["recordio-bert", "--shards", "1000000000"], "--shards"),
        (["recordio-bert", "--max-seq-length", "100000000"], "--max-seq-length"),
        (["recordio-bert", "--dupe-factor", "1000000"], "--dupe-factor"),
    ],
)
def test_counts_out_of_bounds_are_named_before_any_environment(
    tree: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    option: str,
) -> None:
    import driver.datasets.framework_writer as framework_writer

    def no_environment(*_args: object) -> None:
        raise AssertionError("a framework environment was asked for")

    monkeypatch.setattr(framework_writer, "run_job", no_environment)
    if argv[0] == "recordio-bert":  # BERT: a corpus and a vocab.txt that do not exist yet
        argv = ["bert-tfrecord", str(tmp_path / "corpus.txt"), str(tmp_path / "vocab.txt"),
                str(tmp_path / "out"), *argv[1:]]  # fmt: skip
    else:
        argv = [argv[0], str(tree), str(tmp_path / "out"), *argv[1:]]
    err = refused(["data", *argv], capsys, option)
    assert " to " in err  # the bound is stated
    assert not (tmp_path / "out").exists()


def test_a_full_disk_while_copying_an_image_names_the_file(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the tree on another file system: no hard link, a copy, which the disk cannot hold
    big = tree / "train" / WNID / f"{WNID}_9.JPEG"
    big.write_bytes(os.urandom(64 << 10))
    with small_tmpfs(tmp_path / "disk", size="40k") as disk:
        line = refused(["data", "raw", str(tree), str(disk / "out")], capsys, "cannot be written")
        assert f"{WNID}_9.JPEG" in line and "no space" in line.lower(), line
        assert not [p for p in (disk / "out").rglob("*.partial")]
        assert sha256_file(big)  # the source is untouched


def test_nothing_is_read_from_the_manifest_folder_but_its_listed_files(tmp_path: Path) -> None:
    # a manifest naming a file in a sub-folder is fine: the names are paths inside the set
    source = tmp_path / "tf"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "train-00000-of-00001").write_bytes(b"")
    forged_tfrecord_set(source, {"sub/train-00000-of-00001": b""})
    assert main(["data", "dali-index", str(source), str(tmp_path / "idx")]) == 0
    assert (tmp_path / "idx" / "sub" / "train-00000-of-00001.idx").read_text() == ""
    assert json.loads((tmp_path / "idx" / MANIFEST).read_text())["format"] == (
        "dali-tfrecord-index"
    )
