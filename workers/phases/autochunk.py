"""Sizing the rest of an auto-chunked job once one of its probe chunks has rendered.

The probe's Blender run gives S (start-up and scene load) and F (per frame) from the times of its
`Saved:` lines, kept for the next job of the same scene; farm.core.chunking picks the size; the ledger
adds the chunks once, atomically.
"""

from __future__ import annotations

import logging

from farm.core import chunking
from farm.core.pipeline import Phase
from farm.core.preview import frames_of, hold_pending, rest_chunks
from farm.core.spec import JobSpec
from farm.ledger import speeds
from farm.ledger.ports import AutochunkLedger
from workers.attempt.context import WorkerContext

log = logging.getLogger(__name__)

FALLBACK = chunking.Measurement(startup_s=10.0, frame_s=10.0, source="no frames timed; defaults")
"""Used when the probe chunk reused every frame (an earlier attempt rendered them)."""


def measure(saved_s: list[float], source: str = "") -> chunking.Measurement:
    """S and F of one Blender run from its `Saved:` times (see farm.core.chunking)."""
    return chunking.measure_saved_times(saved_s, source)


def plan_rest(
    ctx: WorkerContext, job_id: str, spec: JobSpec, saved_s: list[float], index: int
) -> bool:
    """Plan and send the rest of the job if its plan is still pending; true if this call did."""
    ledger: AutochunkLedger = ctx.ledger
    job = ledger.job(job_id)
    if job.get("plan_pending") != "1" or hold_pending(job):
        return False  # planned already, or the rest waits for `farm resume` (farm.control.preview)
    shown = frames_of(job)
    if shown:
        return _plan_after_preview(ctx, job_id, spec, saved_s, shown, int(job["chunks_total"]))
    if saved_s:
        m = chunking.measure_saved_times(saved_s, f"probe chunk {index} of {job_id}")
        ledger.save_measurement(
            job["source_key"], m, resolution=str(spec.resolution), samples=spec.samples
        )
    else:
        m = FALLBACK
    pool = speeds.render_pool(ctx.settings, ledger)
    probed = chunking.probe_wave(spec.frames, int(job["chunks_total"]))
    left = spec.frames.count - sum(len(c.frames) for c in probed)
    choice = chunking.choose_chunk_size(frames=left, m=m, pool=pool)
    rest = chunking.rest_after(spec.frames, probed, choice.chunk_size)
    won = ledger.plan_rest(
        job_id,
        after=len(probed),
        chunks=list(rest),
        chunk_size=choice.chunk_size,
        reason="auto: " + choice.reason,
    )
    if won:
        # Sent by the one caller that planned. A worker lost between the plan and these sends
        # leaves queued chunks without messages: a known gap (bench/README.md).
        for chunk in rest:
            ctx.dispatch.send(Phase.RENDER, job_id, chunk.index)
        log.info("job %s: %d more chunks of %d frames", job_id, len(rest), choice.chunk_size)
    return won


def _plan_after_preview(
    ctx: WorkerContext,
    job_id: str,
    spec: JobSpec,
    saved_s: list[float],
    shown: list[int],
    planned: int,
) -> bool:
    """The rest of an auto-sized job with a preview, from the first preview frame's time: one
    frame cannot tell start-up from rendering (S is taken as 0, F as the whole), which errs toward
    smaller chunks; it is not kept for later jobs of the scene for that reason."""
    m = chunking.measure_saved_times(saved_s, f"preview of {job_id}") if saved_s else FALLBACK
    pool = speeds.render_pool(ctx.settings, ctx.ledger)
    left = spec.frames.count - len(shown)
    choice = chunking.choose_chunk_size(frames=max(left, 1), m=m, pool=pool)
    rest = rest_chunks(spec.frames, shown, choice.chunk_size, start=planned)
    won = ctx.ledger.plan_rest(job_id, after=planned, chunks=list(rest),
                               chunk_size=choice.chunk_size, reason="auto: " + choice.reason)  # fmt: skip
    if won:
        for chunk in rest:
            ctx.dispatch.send(Phase.RENDER, job_id, chunk.index)
        log.info("job %s: %d more chunks after its preview", job_id, len(rest))
    return won
