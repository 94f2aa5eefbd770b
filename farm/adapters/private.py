"""Files only their owner may read (secrets, configs with passwords), created that way: the mode is
given to open(2), never set after the bytes are on disk, and the file appears by an atomic rename."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` as mode 0600, atomically (readers see the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a stale tmp file of another mode keeps its mode on O_CREAT
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fd = -1
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(tmp, path)


def private_dir(path: Path) -> Path:
    """Make `path` (and its missing parents) and leave it 0700: the farm's data is its owner's."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path
