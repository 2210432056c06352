"""Writes that survive a crash: fsync of files and of the folder that holds a rename.

``os.replace`` is atomic, but the new name only reaches the disk once the folder is synced, and the file's
bytes only once the file is. Checkpoint folders and training state go through these helpers.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | Path) -> None:
    """Flush a file's bytes, or a folder's entries, to the disk."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if Path(path).is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | Path) -> None:
    """fsync every file directly in ``folder``, then the folder itself."""
    for item in Path(folder).iterdir():
        if item.is_file():
            fsync_path(item)
    fsync_path(folder)


def replace_durably(src: str | Path, dst: str | Path) -> None:
    """``os.replace(src, dst)`` with the file synced before and its folder after the rename."""
    fsync_path(src)
    os.replace(src, dst)
    fsync_path(Path(dst).parent)
