"""A job's source (a render job's scene, a transcode job's master) in this worker's cache.

Sources are content-addressed in the store, so a cached copy of the right size is the right one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from farm.core.errors import PermanentError
from workers.attempt.context import WorkerContext

_FETCHING: dict[Path, threading.Lock] = {}
_FETCHING_GUARD = threading.Lock()


def fetch_source(ctx: WorkerContext, key: str) -> Path:
    """The source's local copy, downloaded once: every chunk of a transcode job on this worker
    reads the same master, and two of them at once must not both write its partial file."""
    local = ctx.scene_cache() / Path(key).name
    with _FETCHING_GUARD:
        lock = _FETCHING.setdefault(local, threading.Lock())
    with lock:
        size = ctx.store.size(key)
        if size is None:
            raise PermanentError(f"{key} is missing from the store; submit the job again")
        try:
            if local.stat().st_size == size:
                os.utime(local)  # the cache's LRU clock (workers.janitor evicts by it)
                return local
        except FileNotFoundError:  # not cached, or evicted between the look and the touch
            pass
        ctx.store.get_file(key, local)
        return local
