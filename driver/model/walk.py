"""The one walk of a session folder (the seal and its drift check, the door, a release), never
following a symlink: symlinks and special files are collected, never read, so that nothing
outside the session comes in and no read of a FIFO blocks; each reader says what it makes of
them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SessionWalk:
    """A session's regular files (relative path -> file) and what its walk did not read."""

    root: Path
    files: dict[str, Path] = field(default_factory=dict)
    symlinks: list[Path] = field(default_factory=list)
    others: list[Path] = field(default_factory=list)  # sockets, fifos, devices

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def walk_session(root: Path) -> SessionWalk:
    """Every regular file under ``root``, folders and names in sorted order, walked without
    following symlinks; symlinks and special files are collected, not read."""
    out = SessionWalk(Path(root))
    for folder, dirs, names in os.walk(out.root, followlinks=False):
        here = Path(folder)
        out.symlinks += [here / name for name in sorted(dirs) if (here / name).is_symlink()]
        dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink())
        for name in sorted(names):
            path = here / name
            if path.is_symlink():
                out.symlinks.append(path)
            elif path.is_file():
                out.files[out.relative(path)] = path
            else:
                out.others.append(path)
    return out


def link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def symlink_refusal(path: Path) -> str:
    return (
        f"{path}: a symlink (to {link_target(path)}) inside a session: refused, not followed; "
        "replace it with the file or folder itself"
    )
