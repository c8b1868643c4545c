"""``dlperf data``: each ImageNet format made from a small JPEG tree the test draws, read back
with the framework's own reader where there is one; the manifest's hash, its stability across
re-runs, resuming, and the hash in a run's records."""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.datasets.manifest import JOB, MANIFEST, dataset_sha256, read_manifest
from driver.frontend.cli import main
from driver.frontend.commands.data import PREPARERS
from driver.model.results import Session
from driver.runtimes.local import LocalRuntime
from driver.schema import ConfigError
from tests.fs_faults import small_tmpfs
from tests.real_frameworks import framework_env

CLASSES = ("n01440764", "n01443537")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """ImageNet's layout at toy size: 3 train and 1 val JPEG of each of 2 classes."""
    root = tmp_path / "imagenet"
    for split, count in (("train", 3), ("val", 1)):
        for label, wnid in enumerate(CLASSES):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for k in range(count):
                size = (32 + k, 24 + label)
                Image.new("RGB", size, (40 * k, 80 * label, 0)).save(folder / f"{wnid}_{k}.JPEG")
    return root


def prepare(fmt: str, tree: Path, out: Path, *extra: str) -> str:
    assert main(["data", fmt, str(tree), str(out), *extra]) == 0
    return json.loads((out / MANIFEST).read_text()) and dataset_sha256(out) or ""


def test_every_preparer_is_a_data_subcommand() -> None:
    with pytest.raises(SystemExit):
        main(["data", "--help"])
    assert set(PREPARERS) >= {"raw", "paddle_lists", "tfrecord", "recordio", "ofrecord", "bert"}


def test_raw_folder_manifest_identity_and_resume(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "raw"
    identity = prepare("raw", tree, out)
    manifest = read_manifest(out)
    assert manifest["format"] == "imagenet-raw" and manifest["source"]["classes"] == 2
    assert sorted(manifest["files"]) == sorted(
        p.relative_to(tree).as_posix() for p in tree.rglob("*.JPEG")
    )
    assert (out / "val" / CLASSES[1] / f"{CLASSES[1]}_0.JPEG").read_bytes() == (
        tree / "val" / CLASSES[1] / f"{CLASSES[1]}_0.JPEG"
    ).read_bytes()
    # resumed: a file lost in between is made again, the identity is the same set's
    (out / "train" / CLASSES[0] / f"{CLASSES[0]}_1.JPEG").unlink()
    assert prepare("raw", tree, out) == identity
    # another copy of "ImageNet" (one image differs) is another set
    Image.new("RGB", (40, 40), (1, 2, 3)).save(tree / "val" / CLASSES[0] / f"{CLASSES[0]}_0.JPEG")
    monkeypatch.chdir(tmp_path)  # an output folder relative to where it is typed
    assert prepare("raw", tree, Path("other")) != identity


def test_paddle_lists_name_each_image_with_its_label(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "paddle"
    prepare("paddle-lists", tree, out)
    val = (out / "val_list.txt").read_text().splitlines()
    assert val == [
        f"val/{CLASSES[0]}/{CLASSES[0]}_0.JPEG 0",
        f"val/{CLASSES[1]}/{CLASSES[1]}_0.JPEG 1",
    ]
    for line in (out / "train_list.txt").read_text().splitlines():
        assert (out / line.split()[0]).is_file()
    assert {"train_list.txt", "val_list.txt"} <= set(read_manifest(out)["files"])


def test_a_tree_without_train_is_refused_naming_it(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "empty").mkdir()
    assert main(["data", "raw", str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    assert "train: (folder): is missing" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="does not exist"):
        read_manifest(tmp_path / "empty")


def test_a_fifo_as_manifest_is_refused_without_reading_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / MANIFEST)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_manifest(tmp_path)
    assert dataset_sha256(tmp_path) is None


READ_TFRECORD = """
import sys, tensorflow as tf
for path in sys.argv[1:]:
    for record in tf.data.TFRecordDataset([path]):
        f = tf.train.Example.FromString(record.numpy()).features.feature
        image = tf.io.decode_jpeg(f["image/encoded"].bytes_list.value[0])
        print(path.rsplit("/", 1)[1], f["image/class/label"].int64_list.value[0],
              f["image/class/synset"].bytes_list.value[0].decode(), image.shape[1],
              f["image/width"].int64_list.value[0])
"""


def test_tfrecord_shards_read_back_with_tensorflow(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = framework_env("tensorflow")
    monkeypatch.chdir(tmp_path)  # folders relative to where the command runs, the writer's too
    tree, out = tree.relative_to(tmp_path), Path("tfrecord")
    identity = prepare("tfrecord", tree, out, "--train-shards", "2", "--val-shards", "1")
    names = sorted(p.name for p in out.iterdir() if p.name not in (MANIFEST, JOB))
    assert names == ["train-00000-of-00002", "train-00001-of-00002", "validation-00000-of-00001"]
    done = subprocess.run(
        [python, "-c", READ_TFRECORD, *(str(out / n) for n in names)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [line.split() for line in done.stdout.splitlines()]
    assert len(rows) == 8  # every image once
    for _name, label, wnid, decoded_width, width in rows:
        assert CLASSES.index(wnid) + 1 == int(label)  # 1-based, as TF-slim's readers expect
        assert decoded_width == width
    # resumed: a shard that is there is not written again
    before = (out / names[0]).stat().st_mtime_ns
    (out / names[2]).unlink()
    assert prepare("tfrecord", tree, out, "--train-shards", "2", "--val-shards", "1") == identity
    assert (out / names[0]).stat().st_mtime_ns == before and (out / names[2]).is_file()
    # DALI's index of each shard: one line a record, contiguous, covering the whole file
    index = tmp_path / "idx"
    assert main(["data", "dali-index", str(out), str(index)]) == 0
    lines = [(out / n, (index / f"{n}.idx").read_text().split("\n")[:-1]) for n in names]
    assert sum(len(entries) for _path, entries in lines) == 8
    for path, entries in lines:
        offsets = [tuple(map(int, entry.split())) for entry in entries]
        assert offsets[0][0] == 0 and sum(length for _o, length in offsets) == path.stat().st_size
        assert all(a[0] + a[1] == b[0] for a, b in zip(offsets, offsets[1:], strict=False))


def test_a_full_disk_in_the_framework_writer_is_one_line_and_leaves_no_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TensorFlow's own error (ResourceExhaustedError, not an OSError) in its environment: the
    # kit shows the writer's one line, not the traceback and log around it.
    framework_env("tensorflow")
    noise = random.Random(3)
    for split, count in (("train", 4), ("val", 1)):
        folder = tmp_path / "noisy" / split / CLASSES[0]
        folder.mkdir(parents=True)
        for k in range(count):
            pixels = bytes(noise.getrandbits(8) for _ in range(96 * 96 * 3))
            Image.frombytes("RGB", (96, 96), pixels).save(folder / f"{CLASSES[0]}_{k}.JPEG")
    with small_tmpfs(tmp_path / "disk", size="12k") as disk:
        argv = ["data", "tfrecord", str(tmp_path / "noisy"), str(disk / "out")]
        assert main([*argv, "--train-shards", "1", "--val-shards", "1"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "writer failed:" in line and "No space left on device" in line, line
        # nothing half-written: only the note of what the folder is being made of
        assert [p.name for p in (disk / "out").iterdir()] == [JOB]


def test_a_tfrecord_cut_short_is_refused_naming_the_byte(tmp_path: Path) -> None:
    from driver.datasets.dali_index import record_index

    path = tmp_path / "train-00000-of-00001"
    path.write_bytes((100).to_bytes(8, "little") + b"\0" * 20)
    with pytest.raises(ConfigError, match="byte 0.*cut short"):
        record_index(path)


READ_RECORDIO = """
import sys, mxnet as mx
rec = sys.argv[1]
reader = mx.recordio.MXIndexedRecordIO(rec[:-4] + ".idx", rec, "r")
for key in reader.keys:
    header, data = mx.recordio.unpack(reader.read_idx(key))
    print(int(header.label), mx.image.imdecode(data).shape[1])
"""


def test_recordio_reads_back_with_mxnet(tree: Path, tmp_path: Path) -> None:
    python = framework_env("mxnet")
    out = tmp_path / "recordio"
    prepare("recordio", tree, out)
    assert set(read_manifest(out)["files"]) == {"train.rec", "train.idx", "val.rec", "val.idx"}
    done = subprocess.run(
        [python, "-c", READ_RECORDIO, str(out / "val.rec")], capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    assert done.stdout.split() == ["0", "32", "1", "32"]


READ_OFRECORD = """
import struct, sys, oneflow as flow
from oneflow.core.record import record_pb2
folder, parts, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for n in range(parts):  # the framing: an 8-byte little-endian length, then the record
    data, offset = open(f"{folder}/part-{n:05d}", "rb").read(), 0
    while offset < len(data):
        (length,) = struct.unpack_from("<q", data, offset)
        record = record_pb2.OFRecord.FromString(data[offset + 8 : offset + 8 + length])
        assert record.feature["encoded"].bytes_list.value[0][:2] == b"\\xff\\xd8"
        offset += 8 + length
    assert offset == len(data)
# OneFlow's own reader, with the arguments OneFlow-Benchmark's ofrecord_util.py gives it
reader = flow.nn.OFRecordReader(folder, batch_size=count, data_part_num=parts,
                                part_name_suffix_length=5, random_shuffle=False)
record = reader()
labels = flow.nn.OFRecordRawDecoder("class/label", shape=(), dtype=flow.int32)(record)
widths = flow.nn.OFRecordRawDecoder("width", shape=(), dtype=flow.int32)(record)
images = flow.nn.OFRecordImageDecoder("encoded", color_space="RGB")(record).numpy()
for label, width, image in zip(labels.numpy(), widths.numpy(), images):
    print(label, width, image.shape[0], image.shape[1])
"""


def test_ofrecord_parts_read_back_with_oneflow(tree: Path, tmp_path: Path) -> None:
    python = framework_env("oneflow")
    out = tmp_path / "ofrecord"
    identity = prepare("ofrecord", tree, out, "--train-shards", "2", "--val-shards", "1")
    assert sorted(read_manifest(out)["files"]) == [
        "train/part-00000", "train/part-00001", "validation/part-00000"
    ]  # fmt: skip
    done = subprocess.run(
        [python, "-c", READ_OFRECORD, str(out / "train"), "2", "6"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [tuple(map(int, line.split())) for line in done.stdout.splitlines()]
    assert len(rows) == 6  # every train image once
    for label, width, decoded_height, decoded_width in rows:
        assert decoded_height == 24 + label  # the tree draws class k's images 24 + k high
        assert decoded_width == width
    assert sorted(r[0] for r in rows) == [0, 0, 0, 1, 1, 1]  # 0-based, as imagenet_ofrecord.py
    # resumed: a lost part is written again, the one there is kept
    kept = (out / "train" / "part-00001").stat().st_mtime_ns
    (out / "train" / "part-00000").unlink()
    assert prepare("ofrecord", tree, out, "--train-shards", "2", "--val-shards", "1") == identity
    assert (out / "train" / "part-00001").stat().st_mtime_ns == kept


def test_a_run_on_a_prepared_folder_records_its_identity(tree: Path, tmp_path: Path) -> None:
    identity = prepare("raw", tree, tmp_path / "raw")
    case = calibration_cases(0.002, 8, ["1n1g"], repeats=1, measured_steps=5)[0]
    session = Session.open(tmp_path / "s")
    done = run_cases(
        [replace(case, data_dir=str(tmp_path / "raw"))], session, LocalRuntime(), printer=print
    )
    assert done.ok
    record = json.loads((session.repeat_dir(case, 1) / "record.json").read_text())
    assert record["extra"]["dataset_sha256"] == identity
