"""A job's source (a render job's scene, a transcode job's master) in this worker's cache.

Sources are content-addressed in the store, so a cached copy of the right size is the right one.
"""

from __future__ import annotations

import os
from pathlib import Path

from farm.errors import PermanentError
from workers.context import WorkerContext


def fetch_source(ctx: WorkerContext, key: str) -> Path:
    local = ctx.scene_cache() / Path(key).name
    size = ctx.store.size(key)
    if size is None:
        raise PermanentError(f"{key} is missing from the store; submit the job again")
    if not local.exists() or local.stat().st_size != size:
        ctx.store.get_file(key, local)
    else:
        os.utime(local)  # the cache's LRU clock (workers.janitor evicts by it)
    return local
