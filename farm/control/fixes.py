"""`farm retry JOB --frames 12-14,40`: frames of a done or failed render job rendered again, only
the segments holding them encoded again (their other frames read from the store), the video
stitched again, and the video it replaces kept as a version (farm.core.fixes)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control import jobs
from farm.control.rebuild import record_control
from farm.core import keys
from farm.core.errors import FarmError, SpecError
from farm.core.fixes import (
    FIXES_FIELD,
    Fix,
    chunks_holding,
    default_reason,
    job_fixes,
    parse_frame_list,
    versions,
)
from farm.core.pipeline import kind_of
from farm.core.spec import JobKind, JobSpec
from farm.core.state import ChunkState, JobState
from farm.core.tiles import fix_slots
from farm.ledger import Ledger

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fixed:
    fix: Fix
    waiting: list[int]
    """The chunks that wait for work now."""


def version_key(job: dict[str, str], version: int) -> str:
    """The store key of the job's video `version` (kept when frames were fixed), or FarmError
    naming the versions it has."""
    kept = versions(job_fixes(job))
    if version not in kept:
        have = ", ".join(f"{n}" for n in kept) or "none: no frames of it were fixed"
        raise FarmError(
            f"job {job.get('id', '')} has no video version {version} (versions: {have})"
        )
    return kept[version]


def fix_frames(
    settings: Settings, job_id: str, frames_arg: str, *, reason: str = "", by: str
) -> Fixed:
    """Render `frames_arg` (`12-14,40`) of a done or failed render job again: see the module."""
    ledger = Ledger.from_url(settings.redis_url)
    job = ledger.job_or_fail(job_id)
    state = job.get("state", "")
    if kind_of(job) is not JobKind.RENDER:
        raise SpecError(f"job {job_id} is a {kind_of(job)} job: --frames fixes a render's frames")
    if state not in (JobState.DONE, JobState.FAILED):
        raise FarmError(
            f"job {job_id} is {state}; --frames fixes frames of a done or failed job "
            "(let it end, or `farm cancel` it and `farm retry --all`)"
        )
    spec = JobSpec.from_json(json.loads(job["spec"]))
    # A tiled still's slots are tiles: its one frame fixes them all (farm.core.tiles.fix_slots).
    frames = (
        fix_slots(spec, frames_arg) if spec.tiles else parse_frame_list(frames_arg, spec.frames)
    )
    held = {int(c["index"]): json.loads(c.get("frames") or "[]") for c in ledger.chunks(job_id)}
    holding = chunks_holding(held, frames)
    fixes = job_fixes(job)
    fix = Fix(
        frames=frames, reason=reason or default_reason(by), by=by, at=time.time(),
        chunks=tuple(holding),
        still=f"{spec.tile_frame} (all {spec.tiles} tiles)" if spec.tiles else "",
    )  # fmt: skip
    if state == JobState.DONE:
        fix = _fix_done(settings, ledger, job, fixes, fix)
        waiting = sorted(holding)
        jobs.resend_waiting(settings, ledger, job_id)
    else:
        waiting = _fix_failed(settings, ledger, job_id, fixes, fix)
    ledger.event(job_id, "frames-fix", frames=fix.shown, reason=fix.reason, by=by)
    return Fixed(fix=fix, waiting=waiting)


def _fix_done(
    settings: Settings, ledger: Ledger, job: dict[str, str], fixes: list[Fix], fix: Fix
) -> Fix:
    """The done job reopened for the fix in one step (fix_frames.lua), its video named as the
    next version: the stitch that makes the new video moves that very object there first
    (workers.phases.versions), as only a worker and the control plane may write outputs."""
    job_id, output = job["id"], job.get("output", "")
    found = Store.from_settings(settings).head(output) if output else None
    if output and found is not None:
        version = 1 + max((f.version or 0 for f in fixes), default=0)
        ext = PurePosixPath(output).suffix.lstrip(".") or "mp4"
        kept = keys.output_version_key(job_id, version, ext)
        fix = replace(fix, version=version, version_key=kept, output_etag=found[1])
    record = json.dumps([f.to_json() for f in (*fixes, fix)])
    stood = max(time.time() - float(job.get("finished") or time.time()), 0.0)
    fields = {
        FIXES_FIELD: record, "output": "", "error": "", "finished": "",
        "paused_s": round(float(job.get("paused_s") or 0) + stood, 3),
        "stitch_transients": 0, "stitch_worker": "",
    }  # fmt: skip
    if not ledger.fix_frames(
        job_id, frames=list(fix.frames), chunks=list(fix.chunks), fields=fields
    ):
        raise FarmError(f"job {job_id} changed while its frames were being fixed: try again")
    _keep(settings, job_id, state=JobState.RUNNING, fixes=json.loads(record))
    return fix


def _fix_failed(
    settings: Settings, ledger: Ledger, job_id: str, fixes: list[Fix], fix: Fix
) -> list[int]:
    """A failed job has no video of its own to keep (one left from before an earlier fix is
    kept by that fix's version, workers.phases.versions): the fixed frames' records are dropped,
    their done chunks made again, and the job retried as `farm retry` does (its failed chunks
    too)."""
    jobs.check_retry(settings, job_id, every_unfinished=False, scene=False)
    for frame in fix.frames:
        ledger.forget_frame(job_id, frame)
    for index in fix.chunks:
        if ledger.chunk(job_id, index).get("state") == ChunkState.DONE:
            ledger.remake_chunk(job_id, index, "its frames are fixed", ChunkState.QUEUED)
    record = [f.to_json() for f in (*fixes, fix)]
    ledger.set_job_fields(job_id, **{FIXES_FIELD: json.dumps(record)})
    _keep(settings, job_id, fixes=record)
    return jobs.reopen(settings, job_id, every_unfinished=False).waiting


def _keep(settings: Settings, job_id: str, **changes: Any) -> None:
    """The fix kept in the store beside the job's spec (control.json): the store is the record."""
    try:
        record_control(Store.from_settings(settings), job_id, **changes)
    except FarmError as exc:
        log.warning("job %s: its fix is in the ledger but not kept in the store (%s)", job_id, exc)
