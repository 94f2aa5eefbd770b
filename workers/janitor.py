"""A worker's disk over weeks: the folder of each job that has ended goes, and the scene cache
keeps to its cap, so a worker that renders job after job does not fill its disk.

A job's folder (`<scratch>/jobs/<job>`) holds its scene tree, its frames until they are encoded,
its Blender's home and its attempts' logs. The tree is hard links into the asset cache
(workers.phases.scene_tree), so an evicted asset's bytes stay on disk until the last tree that links it
goes: removing the trees of ended jobs is what makes that cache's cap hold.

A folder is kept while work of its job runs in this process (a task, the encode lane, a stitch);
the sweep after that removes it, ending the job's idle warm Blender first (its home is there). A
retried job runs anew: its next attempt here waits for a sweep of its folder in progress, then
builds the folder again. Frames go sooner: on a host that only renders, once they are in the
store (workers.phases.frames); on one that encodes, once its segment holds them (workers.phases.segment).
"""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from farm.core.errors import FarmError
from farm.core.state import ENDED
from workers.attempt.context import WorkerContext
from workers.phases.scene_tree import AssetCache

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Swept:
    jobs: list[str]
    """Jobs whose folders were removed."""
    scenes: list[str]
    """Scene files evicted from the cache."""


def sweep(ctx: WorkerContext) -> Swept:
    """Remove the folders of jobs that have ended (or are gone from the ledger) and have nothing
    running here (their idle warm Blenders ended first), then evict the least recently used
    scenes over the cache's cap, never those of the jobs whose folders stay. Raises FarmError
    when the ledger cannot be read."""
    root = ctx.scratch / "jobs"
    removed: list[str] = []
    keep: set[str] = set()
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if not folder.is_dir():
            continue
        job_id = folder.name
        with ctx.jobs_here.sweeping(job_id) as free:
            job = ctx.ledger.job(job_id)
            ended = not job or job.get("state", "") in ENDED
            if free and ended:
                if ctx.warm is not None:  # an idle Blender of the job: its home is in the folder
                    ctx.warm.end(job_id)
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(job_id)
                continue
        if job.get("source_key"):
            keep.add(Path(job["source_key"]).name)
    # Nor one used since the last sweep: a chunk may have fetched it after the folders were read.
    scenes = scene_cache(ctx).evict(keep, spare_s=2 * ctx.settings.disk_sweep_s)
    if removed:
        log.info("removed the folders of %d ended jobs: %s", len(removed), ", ".join(removed))
    return Swept(jobs=removed, scenes=scenes)


def scene_cache(ctx: WorkerContext) -> AssetCache:
    """The scenes (and transcode masters) fetched whole, by their store key's name; capped like
    the asset cache, and apart from it."""
    return AssetCache(ctx.scene_cache(), ctx.settings.asset_cache_mb * 1024 * 1024)


def start(ctx: WorkerContext) -> threading.Thread:
    """Sweep now (what an earlier run of this worker left) and every `disk_sweep_s` after (one
    ledger read per job folder left), until the worker drains."""

    def loop() -> None:
        while not ctx.drain.active.is_set():
            try:
                sweep(ctx)
            except FarmError as exc:  # Redis may be restarting; sweep again later
                log.warning("sweeping the worker's disk failed: %s", exc)
            except Exception:  # never let the janitor die quietly
                log.exception("sweeping the worker's disk raised")
            ctx.drain.active.wait(ctx.settings.disk_sweep_s)

    thread = threading.Thread(target=loop, daemon=True, name="janitor")
    thread.start()
    return thread
