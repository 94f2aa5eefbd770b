"""No idle tail, the worker's side: a render worker with no task in hand and an empty render queue
splits the longest running chunk (farm.core.split picks it, the ledger's SPLIT script decides) and
sends the new chunk's render, which it then takes itself.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import task_postrun, task_prerun

from farm.core.errors import FarmError
from farm.core.pipeline import PHASES, Phase
from farm.core.split import MIN_REST, SLACK_S, WAKE_LAG_S, Split, choose
from farm.core.state import ChunkState, JobState
from farm.ledger.ports import SplitterLedger
from workers.attempt.context import WorkerContext

log = logging.getLogger(__name__)
EVERY_S = 1.0
"""How often an idle worker looks for a chunk to split (and at once when its last task ends)."""
JOBS_LOOKED_AT = 50
"""The newest jobs scanned: a split only ever helps a job that is running now."""


class Activity:
    """Tasks running in this worker process (Celery's signals count them). `freed` is set when
    the last one ends: the splitter looks then, not up to a second later (at the end of a job
    every second a worker waits is a second of the tail)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self.freed = threading.Event()

    def started(self, **_: Any) -> None:
        with self._lock:
            self._running += 1

    def ended(self, **_: Any) -> None:
        with self._lock:
            self._running = max(self._running - 1, 0)
            if self._running == 0:
                self.freed.set()

    @property
    def idle(self) -> bool:
        return self._running == 0


def split_once(ctx: WorkerContext) -> Split | None:
    """Split one chunk if there is nothing to take and a split is worth it; sends the new chunk.
    Nothing to take: no render waits, nor anything else this worker serves (a stitch, an
    encode), which it may take next, leaving the new chunk to wait."""
    ledger: SplitterLedger = ctx.ledger
    render = str(PHASES[Phase.RENDER].queue)
    waiting = [render, *(q for q in ctx.queues if q != render)]  # render first: the usual one
    if any(ledger.queue_length(queue) > 0 for queue in waiting):
        return None
    jobs = []
    for job_id in ledger.job_ids(JOBS_LOOKED_AT):
        job = ledger.job(job_id)
        if job.get("state") == JobState.RUNNING and job.get("plan_pending") != "1":
            jobs.append((job, ledger.chunks(job_id)))
    # The owner hears of a split at its next renewal (workers.attempt.lease renews every <= 2 s), or at
    # once where it is subscribed to its wake-ups (workers.attempt.wake, its heartbeat says so).
    owners = {
        c["worker"] for _, chunks in jobs for c in chunks
        if c.get("state") == ChunkState.RENDERING and c.get("worker")
    }  # fmt: skip
    woken = {name for name, info in ledger.worker_info(owners).items() if info.get("wake")}
    plan = choose(
        jobs,
        lag_s=min(ctx.settings.lease_renew_s, 2.0) + SLACK_S,
        lag_of=dict.fromkeys(woken, WAKE_LAG_S),
        # The new chunk is most likely this worker's: where its Blender has the job's scene open
        # (workers.host.warm) it starts at once.
        warm_jobs=ctx.warm.idle_labels() if ctx.warm is not None else frozenset(),
    )
    if plan is None:
        return None
    new = ledger.split_chunk(
        plan.job_id,
        plan.index,
        token=plan.token,
        last_frame=plan.last_frame,
        chunks_total=plan.chunks_total,
        min_rest=MIN_REST,
    )
    if new is None:
        return None
    ctx.dispatch.send(Phase.RENDER, plan.job_id, new)
    log.info("job %s: split chunk %d after frame %d; chunk %d takes %d frames", plan.job_id,
             plan.index, plan.last_frame, new, plan.moved)  # fmt: skip
    return plan


def start(ctx: WorkerContext, activity: Activity | None = None) -> Activity:
    """Look for a split when this worker's last task ends, and every EVERY_S while it serves
    the render queue and has no task in hand."""
    activity = activity or Activity()
    task_prerun.connect(activity.started, weak=False)
    task_postrun.connect(activity.ended, weak=False)
    queue = str(PHASES[Phase.RENDER].queue)

    def loop() -> None:
        while True:
            activity.freed.wait(EVERY_S)
            activity.freed.clear()
            if ctx.drain.active.is_set():
                return
            if not activity.idle or queue not in ctx.queues:
                continue
            try:
                split_once(ctx)
            except FarmError as exc:  # Redis may be restarting; look again later
                log.warning("looking for a chunk to split failed: %s", exc)
            except Exception:  # never let the splitter die quietly
                log.exception("looking for a chunk to split raised")

    threading.Thread(target=loop, daemon=True, name="splitter").start()
    return activity
