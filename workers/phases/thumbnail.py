"""Frame thumbnails for the job page: a small JPEG of each frame, made by the render script beside
the frame (farm/blender/script.py, Renderer.save_thumbnail) and uploaded once the frame is
recorded.

A thumbnail is a convenience, never part of the record: when one cannot be made or stored the
frame still counts, and the page shows fewer pictures.
"""

from __future__ import annotations

import logging
from pathlib import Path

from farm.adapters.store import Store
from farm.core import keys
from farm.core.errors import FarmError
from workers.host.box import open_boxed

log = logging.getLogger(__name__)


def upload(store: Store, job_id: str, frame: int, writer: str, path: Path) -> bool:
    """Store the frame's thumbnail under its writer's name (keys.thumb_key); False (logged)
    when that failed."""
    try:
        with open_boxed(path) as fh:  # the box wrote it: never a link to a host file
            store.put_open(keys.thumb_key(job_id, frame, writer), fh, intermediate=True)
        return True
    except (FarmError, OSError) as exc:
        log.warning("no thumbnail of frame %d: %s", frame, exc)
        return False
