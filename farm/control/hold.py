"""The hold after a job's preview frames (`farm submit --preview N --hold`): a job moved to `held`
once they are done, with the rest estimated from their real timings; and its release on `farm
resume`, which plans and sends the rest (the rules: farm.core.preview).

A held job's rest is not in the ledger at all until it is released: no message, no orphan to
resend, nothing a worker could claim. The release plans it the way an auto-sized job's rest is
planned (Ledger.plan_rest, once, with the completion gate shut until then), and moves as a job
waiting for its parents is released (farm.control.depends): a ledger transition one caller wins,
kept in the store before the chunks go."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from farm.control.estimate import measured
from farm.control.preview import chunk_frames, send_chunks
from farm.control.rebuild import record_control
from farm.core.chunking import PROBE_FRAMES, Measurement, Pool, choose_chunk_size
from farm.core.errors import FarmError
from farm.core.plan import Chunk
from farm.core.preview import HOLD, HOLD_RELEASED, REST_ESTIMATE, rest_chunks, rest_estimate
from farm.core.spec import JobSpec
from farm.core.state import ChunkState, JobState
from farm.ledger import Move

if TYPE_CHECKING:
    from farm.adapters.store import Store
    from farm.dispatch import Dispatcher

log = logging.getLogger(__name__)


class ReleaseLedger(Protocol):
    """What releasing a held job reads and moves (farm.ledger.Ledger)."""

    def job(self, job_id: str) -> dict[str, str]: ...
    def chunks(self, job_id: str) -> list[dict[str, str]]: ...
    def move_job(self, job_id: str, target: JobState, **fields: Any) -> Move: ...
    def try_start_stitch(self, job_id: str) -> bool: ...
    def plan_rest(
        self, job_id: str, *, after: int, chunks: list[Chunk], chunk_size: int, reason: str
    ) -> bool: ...


class HoldLedger(ReleaseLedger, Protocol):
    """What the reconciler's step reads besides: the live jobs and the render workers."""

    def live_job_ids(self, *, keep_ended: bool = False) -> list[str]: ...
    def job_fields(self, job_ids: list[str], *names: str) -> list[tuple[str, ...]]: ...
    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]: ...


def settle_holds(
    ledger: HoldLedger, store: Store | None, dispatch: Dispatcher
) -> tuple[list[str], list[str]]:
    """Each running job with `--hold` whose preview chunks are all done: moved to `held`, the
    rest's estimate from their timings on its record. And each released job whose rest is not
    planned yet (its release was cut short): planned and sent. (held, planned) job ids."""
    held: list[str] = []
    planned: list[str] = []
    ids = ledger.live_job_ids()
    fields = ledger.job_fields(ids, "state", HOLD, HOLD_RELEASED, "plan_pending")
    for job_id, (state, hold, released, pending) in zip(ids, fields, strict=True):
        if state != JobState.RUNNING or hold != "1":
            continue
        if released:
            if pending == "1" and plan_rest(ledger, dispatch, job_id):
                planned.append(job_id)
            continue
        chunks = ledger.chunks(job_id)
        if not chunks or any(c.get("state") != ChunkState.DONE for c in chunks):
            continue
        estimate = estimate_rest(ledger, ledger.job(job_id), chunks)
        move = ledger.move_job(job_id, JobState.HELD, held=time.time(),
                               **{REST_ESTIMATE: json.dumps(estimate)})  # fmt: skip
        if move.moved:
            log.info("job %s held after its preview frames: `farm resume %s` renders the rest",
                     job_id, job_id)  # fmt: skip
            held.append(job_id)
    return held, planned


def estimate_rest(
    ledger: HoldLedger, job: dict[str, str], chunks: list[dict[str, str]]
) -> dict[str, Any]:
    """The rest's expected time and cost from the preview chunks' own timings and the rate they
    were charged ({} where they left no timing: a ledger rebuilt from the store)."""
    timed = [c for c in chunks if float(c.get("gpu_s") or 0) > 0]
    if not timed:
        return {}
    try:
        m = measured(timed, f"the preview of {job.get('id', '')}")
    except FarmError:
        return {}
    spec = JobSpec.from_json(json.loads(job["spec"]))
    done = {f for c in chunks for f in chunk_frames(c)}
    left = sum(1 for f in spec.frames.frames if f not in done)
    gpu_s = sum(float(c.get("gpu_s") or 0) for c in timed)
    paid = sum(float(c.get("cost") or 0) for c in timed)
    workers = [n for n, w in ledger.workers().items() if "render" in w.get("queues", [])]
    pool = Pool(workers=max(len(workers), 1), splits=True)
    est = rest_estimate(m, frames_left=left, chunk_size=spec.chunk_size, pool=pool,
                        paid_per_gpu_s=paid / gpu_s if gpu_s > 0 else 0.0)  # fmt: skip
    return est.to_json()


def release(
    ledger: ReleaseLedger,
    store: Store | None,
    dispatch: Dispatcher,
    job_id: str,
    *,
    max_cost: float | None = None,
) -> int:
    """`farm resume` of a held job (with a new budget if given): running again, the release kept
    in the store (a ledger rebuilt from it never holds the job again), the rest planned and sent.
    The chunks sent; FarmError where the job is not held."""
    budget = {} if max_cost is None else {"max_cost": max_cost}
    move = ledger.move_job(job_id, JobState.RUNNING, **{HOLD_RELEASED: time.time()}, **budget)
    if not move.moved:
        raise FarmError(f"job {job_id} is {move.previous or 'gone'}; only held jobs are released")
    if store is not None:
        try:
            record_control(store, job_id, state=JobState.RUNNING, hold_released=time.time(),
                           **budget)  # fmt: skip
        except FarmError as exc:
            log.warning("job %s: its release is not kept in the store (%s)", job_id, exc)
    return plan_rest(ledger, dispatch, job_id)


def _rest_size(spec: JobSpec, job: dict[str, str], chunks: list[dict[str, str]], left: int) -> int:
    """A fixed size as asked; auto: the estimate's (from the preview's timings), else chunking's
    rule over a measurement of the preview chunks, else two frames a chunk."""
    if spec.chunk_size > 0:
        return spec.chunk_size
    known = json.loads(job.get(REST_ESTIMATE) or "{}")
    if int(known.get("chunk_size") or 0) > 0:
        return int(known["chunk_size"])
    timed = [c for c in chunks if float(c.get("gpu_s") or 0) > 0]
    try:
        m: Measurement = measured(timed, "preview") if timed else measured([], "")
    except FarmError:
        return PROBE_FRAMES
    return choose_chunk_size(frames=max(left, 1), m=m, pool=Pool(workers=1, splits=True)).chunk_size


def plan_rest(ledger: ReleaseLedger, dispatch: Dispatcher, job_id: str) -> int:
    """The frames no chunk holds yet, planned once (the caller that wins sends them; the
    completion gate opens where there were none). The chunks sent."""
    job = ledger.job(job_id)
    if job.get("plan_pending") != "1":
        return 0
    chunks = ledger.chunks(job_id)
    spec = JobSpec.from_json(json.loads(job["spec"]))
    taken = {f for c in chunks for f in chunk_frames(c)}
    left = sum(1 for f in spec.frames.frames if f not in taken)
    size = _rest_size(spec, job, chunks, left)
    rest = rest_chunks(spec.frames, taken, size, start=len(chunks))
    reason = f"after the preview: {len(rest)} chunks of up to {size} frames"
    if not ledger.plan_rest(job_id, after=len(chunks), chunks=list(rest), chunk_size=size,
                            reason=reason):  # fmt: skip
        return 0
    sent = send_chunks(dispatch, ledger.job(job_id), ((c.index, c.frames) for c in rest))
    if ledger.try_start_stitch(job_id):
        dispatch.stitch(job_id)
    log.info("job %s: the rest planned after its preview, %d chunks sent", job_id, sent)
    return sent
