"""``dlperf data dali-index``: the index files DALI's TFRecord reader needs beside TFRecords
(``--data_idx_dir`` of NGC TF1), one ``<offset> <length>`` line per record, as DALI's
``tfrecord2idx`` writes them; made from a folder ``dlperf data tfrecord`` prepared."""

from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path

from driver.datasets.manifest import (
    claim,
    dataset_sha256,
    read_manifest,
    verify_files,
    write_manifest,
)
from driver.files import ensure_dir, write_text
from driver.schema import ConfigError

# A TFRecord record: 8-byte little-endian length, 4-byte CRC of it, the data, 4-byte CRC.
LENGTH, CRC = 8, 4


def record_index(path: Path) -> str:
    """The index of one TFRecord file; a record cut short is a ConfigError naming the file."""
    lines = []
    size = path.stat().st_size
    with path.open("rb") as stream:
        while True:
            start = stream.tell()
            head = stream.read(LENGTH)
            if not head:
                break
            if len(head) < LENGTH:
                raise ConfigError(path, f"byte {start}", "a record is cut short; re-make it")
            (length,) = struct.unpack("<q", head)
            end = start + LENGTH + CRC + length + CRC
            if length < 0 or end > size:
                raise ConfigError(path, f"byte {start}", "a record is cut short; re-make it")
            stream.seek(end)
            lines.append(f"{start} {end - start}\n")
    return "".join(lines)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    manifest = read_manifest(args.source)
    if manifest["format"] != "imagenet-tfrecord":
        raise ConfigError(
            Path(args.source) / "dlperf-dataset.json",
            "format",
            f"is {manifest['format']!r}; give a folder `dlperf data tfrecord` made",
        )
    shards = verify_files(args.source, manifest)  # every name inside the folder, unchanged
    source = {"dataset": "imagenet-tfrecord", "tfrecord_sha256": dataset_sha256(args.source)}
    out = ensure_dir(args.out)
    claim(out, "dali-tfrecord-index", {"source": source})
    files = []
    for shard in shards:
        target = out / f"{shard.relative_to(args.source).as_posix()}.idx"
        if not target.exists():  # resumable: each index is written whole or not at all
            write_text(target, record_index(shard))
        files.append(target)
    identity = write_manifest(out, "dali-tfrecord-index", files, source)
    print(
        f"dali-tfrecord-index: {len(files)} index files in {out}, "
        f"{time.monotonic() - started:.1f} s\ndataset_sha256: {identity}",
        file=sys.stderr,
    )
    print(identity)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dali-index", help="DALI index files for a TFRecord folder (NGC TF1 --data_idx_dir)"
    )
    parser.add_argument("source", type=Path, help="a folder `dlperf data tfrecord` made")
    parser.add_argument("out", type=Path, help="the index folder to write")
    parser.set_defaults(func=run)
