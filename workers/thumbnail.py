"""Frame thumbnails for the job page: a small JPEG of each frame, made as the frame is uploaded.

A thumbnail is a convenience, never part of the record: when ffmpeg cannot make one the frame
still counts, and the page shows fewer pictures.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from farm import keys, proc
from farm.errors import FarmError
from farm.store import Store

log = logging.getLogger(__name__)
WIDTH = 320


def thumbnail_argv(ffmpeg: str, src: Path, dest: Path, width: int = WIDTH) -> list[str]:
    """One frame scaled to at most `width` pixels wide (even height), as a JPEG (pure)."""
    return [
        ffmpeg, "-nostdin", "-v", "error", "-y", "-i", str(src),
        "-vf", f"scale='min({width},iw)':-2", "-frames:v", "1",
        "-pix_fmt", "yuvj420p", "-q:v", "5", str(dest),
    ]  # fmt: skip


def make_and_upload(ffmpeg: str, store: Store, job_id: str, frame: int, src: Path) -> bool:
    """Make the frame's thumbnail beside it and upload it; False (logged) when that failed."""
    dest = src.with_name(f"{src.stem}.thumb.jpg")
    try:
        result = proc.capture(thumbnail_argv(ffmpeg, src, dest), timeout_s=60)
        if result.returncode != 0 or not dest.exists():
            log.warning("no thumbnail of frame %d: %s", frame, result.stderr.strip()[-300:])
            return False
        store.put_file(keys.thumb_key(job_id, frame), dest, intermediate=True)
        return True
    except (FarmError, OSError, subprocess.TimeoutExpired) as exc:
        log.warning("no thumbnail of frame %d: %s", frame, exc)
        return False
    finally:
        dest.unlink(missing_ok=True)
