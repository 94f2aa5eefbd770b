"""What of a child's log goes to the store: all of it up to a cap (Settings.log_max_bytes), else
its head and its tail with a marker between, so a scene that prints without end costs the store,
and whoever reads the log, no more than the cap."""

from __future__ import annotations

import os
from pathlib import Path

CUT_MARKER = b"[farm: %d bytes of this log cut here; FARM_LOG_MAX_BYTES keeps its head and tail]\n"
"""Put where the middle of a log over the cap was left out; says how much and where."""


def kept_log(path: Path, max_bytes: int) -> bytes:
    """The log at `path` as it is kept: whole up to `max_bytes`, else its first and last
    `max_bytes / 2` bytes (less the marker), each cut at a line's end so that no line, a
    redacted secret's included, is kept in part. Reads no more than it keeps."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= max_bytes:
            return fh.read(max_bytes)
        half = (max_bytes - len(CUT_MARKER) - 20) // 2  # room for the count
        head = fh.read(half)
        head = head[: head.rfind(b"\n") + 1]
        fh.seek(size - half)
        tail = fh.read(half)
        tail = tail[tail.find(b"\n") + 1 :]
    return head + CUT_MARKER % (size - len(head) - len(tail)) + tail
