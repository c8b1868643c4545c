"""driver/files.py: atomic writes, and file-system faults as clear errors (real mounts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver.files import (
    TEMP_PREFIX,
    KitWriteError,
    ensure_dir,
    remove_tree,
    write_json,
    write_text,
)
from tests.fs_faults import fill, read_only, small_tmpfs


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b.json"
    write_json(target, {"x": 1})
    write_json(target, {"x": 2})
    assert target.read_text() == '{\n  "x": 2\n}\n'
    assert [p.name for p in target.parent.iterdir()] == ["b.json"]


def test_a_full_disk_is_a_clear_error_and_the_old_file_survives(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        write_text(disk / "report.md", "old\n")
        fill(disk)
        with pytest.raises(KitWriteError) as caught:
            write_text(disk / "report.md", "x" * 100_000)
        message = str(caught.value)
        assert str(disk / "report.md") in message and "No space left" in message
        assert "free some space" in message
        assert (disk / "report.md").read_text() == "old\n"
        assert not [p for p in disk.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_a_read_only_folder_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    with read_only(folder):
        with pytest.raises(KitWriteError, match="read-only"):
            write_text(folder / "x.txt", "x")
        with pytest.raises(KitWriteError, match=str(folder / "sub")):
            ensure_dir(folder / "sub")


def test_a_file_or_dangling_symlink_in_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(KitWriteError, match="it is a file, not a folder"):
        ensure_dir(tmp_path / "file")
    with pytest.raises(KitWriteError, match="not a folder"):
        write_text(tmp_path / "file" / "x", "x")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    with pytest.raises(KitWriteError, match="dangling symlink"):
        ensure_dir(tmp_path / "dangling")
    (tmp_path / "folder").mkdir()
    with pytest.raises(KitWriteError, match="it is a folder"):
        write_text(tmp_path / "folder", "x")


def test_a_read_only_tree_the_kit_wrote_is_removed(tmp_path: Path) -> None:
    stale_dir = tmp_path / f"{TEMP_PREFIX}release-1-v1.0"
    (stale_dir / "raw").mkdir(parents=True)
    (stale_dir / "raw" / "a").write_text("x")
    (stale_dir / "raw" / "a").chmod(0o444)
    (stale_dir / "raw").chmod(0o555)
    (tmp_path / "keep.json").write_text("{}")
    remove_tree(stale_dir)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.json"]
