"""Thin Celery tasks: decode the payload, call the work, return a small deterministic dict. A
chunk phase's task runs workers.attempt.policy's run_chunk_phase, which holds the failure policy;
the stitch's task keeps the job's stitch going through transient errors, a bounded number of
times (run_stitch).
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from celery import Celery

from farm.core.errors import FarmError, PermanentError, TransientError
from farm.core.pipeline import PHASES, STITCH, Phase, PhaseSpec
from farm.core.spec import JobKind, JobSpec
from farm.core.state import JobState
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import Work
from workers.attempt.policy import retry_in_s, run_chunk_phase
from workers.phases.ladder_stitch import stitch_encode
from workers.phases.render import render_frames
from workers.phases.segment import segment_chunk
from workers.phases.stitch import stitch_frames
from workers.phases.tiles import stitch_still
from workers.phases.transcode import transcode_segment

log = logging.getLogger(__name__)

MAX_STITCH_TRANSIENT = 10
"""Transient errors of a job's stitch before the job fails with the last (about 15 minutes)."""


PHASE_WORK: dict[Phase, Work] = {
    Phase.RENDER: render_frames,
    Phase.SEGMENT: segment_chunk,
    Phase.TRANSCODE: transcode_segment,
}
"""Each chunk phase's work; the pipeline table says everything else about it."""

STITCHERS: dict[
    JobKind, Callable[[WorkerContext, str, dict[str, str], JobSpec], dict[str, Any]]
] = {
    JobKind.RENDER: stitch_frames,
    JobKind.TRANSCODE: stitch_encode,  # a single output, or a ladder's renditions
}


def stitch_job(ctx: WorkerContext, job_id: str) -> dict[str, Any]:
    job = ctx.ledger.job(job_id)
    if not job or job.get("state") != JobState.STITCHING:
        return {"skipped": f"job is {job.get('state', 'unknown')}"}
    spec = JobSpec.from_json(json.loads(job["spec"]))
    ctx.ledger.stitch_taken(job_id, ctx.name)  # should this worker vanish (farm.control.reconcile)
    with ctx.jobs_here.using(job_id):  # its work folder is in the job's (workers.janitor)
        stitcher = stitch_still if spec.tiles else STITCHERS[spec.kind]  # a still's tiles merge
        return stitcher(ctx, job_id, job, spec)


def run_stitch(ctx: WorkerContext, job_id: str) -> dict[str, Any]:
    """The stitch under its failure policy: a transient error tries again with backoff (the job
    stays STITCHING), anything else fails the job, never leaving it STITCHING with nothing to
    drive it."""
    try:
        return stitch_job(ctx, job_id)
    except TransientError as exc:
        tries = ctx.ledger.bump_job(job_id, "stitch_transients")
        if tries > MAX_STITCH_TRANSIENT:
            ctx.ledger.move_job(job_id, JobState.FAILED, finished=time.time(),
                                error=f"stitch gave up after {tries} tries: {exc}")  # fmt: skip
            return {"job_id": job_id, "failed": str(exc)[-500:]}
        log.warning("stitch of %s hit a transient error, retrying: %s", job_id, exc)
        ctx.dispatch.stitch(job_id, countdown_s=retry_in_s(tries))
        return {"job_id": job_id, "retrying": str(exc)[-500:]}
    except FarmError as exc:
        if isinstance(exc, PermanentError):  # the workspace already failed it, if inside
            ctx.ledger.move_job(job_id, JobState.FAILED, error=f"stitch failed: {exc}",
                                finished=time.time())  # fmt: skip
        return {"job_id": job_id, "failed": str(exc)[-500:]}
    except Exception as exc:
        log.exception("stitch of %s raised", job_id)
        ctx.ledger.move_job(job_id, JobState.FAILED, error=f"stitch failed: {exc}",
                            finished=time.time())  # fmt: skip
        return {"job_id": job_id, "failed": str(exc)[-500:]}


_CONTEXTS: weakref.WeakKeyDictionary[Celery, Callable[[], WorkerContext]] = (
    weakref.WeakKeyDictionary()
)
"""Each registered app's context getter (one app per worker process): worker_context's."""


def worker_context(app: Celery) -> WorkerContext:
    """The context of the worker that serves `app` in this process: for the tasks of modules a
    worker imports through Celery's include (settings.worker_include), which Celery imports as
    the worker starts, after `register`."""
    return _CONTEXTS[app]()


def register(app: Celery, get_ctx: Callable[[], WorkerContext]) -> None:
    """The farm's tasks on `app`, each running with `get_ctx()`."""
    _CONTEXTS[app] = get_ctx
    for spec in PHASES.values():
        _register_phase(app, get_ctx, spec)

    @app.task(name=STITCH.task, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def stitch(job_id: str) -> dict[str, Any]:
        return run_stitch(get_ctx(), job_id)


def _register_phase(app: Celery, get_ctx: Callable[[], WorkerContext], spec: PhaseSpec) -> None:
    @app.task(name=spec.task, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def chunk_phase(job_id: str, chunk: int) -> dict[str, object]:
        return run_chunk_phase(get_ctx(), job_id, chunk, spec, PHASE_WORK)
