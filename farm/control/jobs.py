"""Steering a job after its submit (farm.control.intake): retry and reopen, cancel, pause, resume and
priority, each kept in the store as well as the ledger (farm.control.rebuild)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.blender import assets
from farm.control import hold
from farm.control.intake import check_blender
from farm.control.rebuild import record_control
from farm.core import cost, keys
from farm.core.errors import FarmError, ObjectMissing, SpecError
from farm.core.pipeline import kind_of, waiting_for
from farm.core.spec import JobKind, JobSpec
from farm.core.state import ENDED, ChunkState, JobState
from farm.dispatch import Dispatcher, make_app
from farm.ledger import FrameRecord, Ledger
from farm.ledger.ports import JobControlLedger

if TYPE_CHECKING:
    from farm.core.sources import SceneInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reopened:
    waiting: list[int]
    """The chunks that wait for work now (queued, interrupted, or remade)."""
    remade: dict[int, str]
    """Done chunks queued again, with why: their segment is gone from the store."""


def reopen(
    settings: Settings,
    job_id: str,
    *,
    every_unfinished: bool,
    fixed: tuple[Path, SceneInfo, assets.Traced] | None = None,
) -> Reopened:
    """`farm retry`: back to running, with a fixed scene if given, and every waiting chunk sent
    again (a duplicate message is harmless: only one claim can win). A done chunk whose segment
    is gone from the store (expired by a lifecycle rule, deleted), which no stitch could join, is
    made again: its stored frames are reused, the rest rendered. `fixed`: the scene, its settings
    as read and its trace (farm.cli.submit.trace_fixed_scene)."""
    ledger: JobControlLedger = Ledger.from_url(settings.redis_url)
    job = ledger.job_or_fail(job_id)
    # Again, before the scene changes: the job may have moved since the CLI's check_retry.
    _check_retry(ledger, job, every_unfinished=every_unfinished, scene=fixed is not None)
    if fixed is not None:
        _replace_scene(settings, ledger, job, *fixed)
    gone = unjoinable_chunks(Store.from_settings(settings), ledger, job_id)
    # A render chunk is encoded again from its stored frames (the encode hands it back to be
    # rendered where they are gone too); a transcode chunk is transcoded again.
    remake_to = ChunkState.RENDERED if kind_of(job) is JobKind.RENDER else ChunkState.QUEUED
    remade = {i: why for i, why in gone.items() if ledger.remake_chunk(job_id, i, why, remake_to)}
    waiting = ledger.reopen_job(job_id, every_unfinished=every_unfinished)
    state = ledger.job(job_id).get("state", "")
    _keep(settings, job_id, state=state or JobState.RUNNING)
    if state == JobState.WAITING:  # it waits for its parents again: they release it
        return Reopened(waiting=sorted({*waiting, *remade}), remade=remade)
    dispatch = Dispatcher(make_app(settings))
    kind = kind_of(job)
    for chunk in ledger.chunks(job_id):
        phase = waiting_for(kind, chunk.get("state", ""))
        if phase is not None:
            dispatch.send(phase.phase, job_id, int(chunk["index"]))
    if ledger.try_start_stitch(job_id):
        dispatch.stitch(job_id)
    return Reopened(waiting=sorted({*waiting, *remade}), remade=remade)


def unjoinable_chunks(store: Store, ledger: JobControlLedger, job_id: str) -> dict[int, str]:
    """The done chunks whose segment the stitch cannot read as their manifest describes it
    (the manifest or the segment gone from the store, or another size), with why. Read 16 at a
    time: a long job's thousand chunks are a few seconds of HEADs, not minutes."""
    done = {
        int(c["index"]): keys.chunk_manifest_key(job_id, c)
        for c in ledger.chunks(job_id)
        if c.get("state") == ChunkState.DONE
    }

    def why(index: int) -> str:
        try:
            segment = store.get_json(done[index])["segment"]
            key, size, etag = str(segment["key"]), int(segment["size"]), segment.get("etag", "")
        except ObjectMissing:
            return "its manifest is gone from the store"
        except (ValueError, KeyError, TypeError, AttributeError):
            return "its manifest in the store cannot be read"
        found = store.head(key)
        if found is None:
            return "its segment is gone from the store"
        if found[0] != size:
            return f"its segment is {found[0]} bytes where its manifest says {size}"
        if etag and found[1] != etag:  # the stitch copies only the very bytes it names
            return "its segment in the store is not the one its manifest names (another ETag)"
        return ""

    with ThreadPoolExecutor(max_workers=16, thread_name_prefix="segment-check") as pool:
        found = dict(zip(done, pool.map(why, done), strict=True))
    return {index: text for index, text in found.items() if text}


def frame_files(
    store: Store, job_id: str, records: Mapping[int, FrameRecord]
) -> list[tuple[str, PurePosixPath]]:
    """What `farm fetch --frames` downloads, each with where it goes in the frames folder:
    every recorded frame's masters, and its File Output files under file_output/, those of the
    writer its record names (keys.frame_folder), never a stale attempt's beside them; the frames
    the video is made of where the job kept no masters (jobs before 0.2). `records`: the job's
    frame records."""
    masters = _recorded(store, keys.masters_prefix(job_id), records)
    if not masters:
        masters = [
            (key, PurePosixPath(PurePosixPath(key).name))
            for key in (keys.frame_key(job_id, f, r.writer) for f, r in sorted(records.items()))
        ]
    outputs = _recorded(store, keys.file_outputs_prefix(job_id), records)
    return masters + [(key, PurePosixPath("file_output", path)) for key, path in outputs]


def _recorded(
    store: Store, prefix: str, records: Mapping[int, FrameRecord]
) -> list[tuple[str, PurePosixPath]]:
    """The keys under `prefix` in a recorded writer's frame folder (or in none: stored before
    folders), each with its name below that folder."""
    found = []
    for key in store.keys(prefix):
        placed = keys.in_frame_folder(key, prefix)
        if placed is None:
            name = key.removeprefix(prefix)
        else:
            frame, writer, name = placed
            record = records.get(frame)
            if record is None or record.writer != writer:  # a stale attempt's, or unrecorded
                continue
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):  # never outside the folder
            log.warning("skipped %s: not a plain path", key.encode("unicode_escape").decode())
            continue
        found.append((key, PurePosixPath(*parts)))
    return found


def check_retry(settings: Settings, job_id: str, *, every_unfinished: bool, scene: bool) -> None:
    """Refuse a retry before anything is read or uploaded for it (a fixed scene's trace hashes
    every file it uses): the job's state, and a scene only for a render job."""
    ledger: JobControlLedger = Ledger.from_url(settings.redis_url)
    _check_retry(ledger, ledger.job_or_fail(job_id), every_unfinished=every_unfinished, scene=scene)


def _check_retry(
    ledger: JobControlLedger, job: dict[str, str], *, every_unfinished: bool, scene: bool
) -> None:
    ledger.check_reopen(job["id"], every_unfinished=every_unfinished)
    if scene and kind_of(job) is not JobKind.RENDER:
        raise SpecError(
            f"job {job['id']} is a {kind_of(job)} job: --scene replaces a render job's .blend"
        )


def _replace_scene(
    settings: Settings, ledger: JobControlLedger, job: dict[str, str], scene: Path, info: SceneInfo,
    traced: assets.Traced,
) -> None:  # fmt: skip
    """The render job's scene from now on, with the files it uses (_check_retry first): refused
    for a Blender no worker has, a size or frame rate the job's frames were not made at, or a
    file missing that the job did not allow missing."""
    job_id = job["id"]
    spec = JobSpec.from_json(json.loads(job["spec"]))
    check_blender(ledger.workers(), info.blender_version)
    _check_same_video(job_id, spec, info)
    new = sorted(set(traced.manifest.missing) - set(spec.missing_assets))
    if new:
        names = "\n  ".join(new)
        raise SpecError(
            f"{len(new)} file(s) the fixed scene uses are missing on this machine:\n  {names}\n"
            "fix the paths in the scene (File > External Data > Find Missing Files) and retry"
        )
    store = Store.from_settings(settings)
    # Every byte stored before the job names any of it: a failed upload leaves the job as it was.
    source_key, _, _ = store.put_content_addressed(scene, lambda sha: keys.scene_key(sha, ".blend"))
    if spec.assets_key:  # the job's tree is laid out from its manifest: the fixed scene's now
        assets.upload(store, traced)
        store.put_json(spec.assets_key, traced.manifest.to_json())
    ledger.replace_source(job_id, source_key)
    _keep(settings, job_id, source_key=source_key)


def _check_same_video(job_id: str, spec: JobSpec, info: SceneInfo) -> None:
    """The job's video is one size and one rate: a fixed scene whose own size or rate differs
    (where the job took the scene's, not a flag's) would render frames its segments cannot join
    with, or play at a rate it was not made for. Such a scene is a new job."""
    if spec.scene is None:
        return  # a job from before scenes were read: the spec's size and rate are applied
    size = "x".join(map(str, info.render_size)), "x".join(map(str, spec.scene.render_size))
    rate = f"{float(info.rate):g} fps", f"{float(spec.scene.rate):g} fps"
    differs = (("renders at", "resolution", *size), ("plays at", "fps", *rate))
    changed = [
        f"{what} {now} (the job's: {was})"
        for what, name, now, was in differs
        if name not in spec.overrides and now != was
    ]
    if changed:
        raise SpecError(
            f"the fixed scene {' and '.join(changed)}; job {job_id}'s video is joined from frames "
            "made as the job's: set the scene back, or submit it as a new job"
        )


def _keep(settings: Settings, job_id: str, **changes: Any) -> None:
    """What was just decided about the job, kept in the store (farm.control.rebuild); where the
    store refuses, the decision stands in the ledger and the warning says what a ledger rebuilt
    from the store would not know."""
    try:
        record_control(Store.from_settings(settings), job_id, **changes)
    except FarmError as exc:
        log.warning(
            "job %s: %s is in the ledger but not kept in the store (%s): a ledger rebuilt from "
            "the store would not know it", job_id, ", ".join(f"{k}={v}" for k, v in changes.items()), exc,
        )  # fmt: skip


def cancel(settings: Settings, job_id: str) -> list[int]:
    """`farm cancel`: queued chunks never start, running ones stop within seconds; the store
    keeps the cancel (a rebuilt ledger leaves the job cancelled). The unfinished chunks."""
    ledger = Ledger.from_url(settings.redis_url)
    job = ledger.job_or_fail(job_id)
    if job.get("state") in ENDED:
        raise FarmError(f"job {job_id} is {job['state']} already")
    chunks = ledger.cancel_job(job_id)
    _keep(settings, job_id, state=JobState.CANCELLED)
    return chunks


def resend_waiting(settings: Settings, ledger: JobControlLedger, job_id: str) -> int:
    """Send again every chunk that waits for a phase (at the job's priority now), and open the
    completion gate if every chunk is done. A duplicate message is harmless: one claim wins."""
    dispatch = Dispatcher(make_app(settings), priority_of=ledger.priority)
    kind = kind_of(ledger.job(job_id))
    sent = 0
    for chunk in ledger.chunks(job_id):
        phase = waiting_for(kind, chunk.get("state", ""))
        if phase is not None:
            dispatch.send(phase.phase, job_id, int(chunk["index"]))
            sent += 1
    if ledger.try_start_stitch(job_id):
        dispatch.stitch(job_id)
    return sent


def pause(settings: Settings, job_id: str, reason: str = "paused by a user") -> str:
    """No new chunk starts; running ones finish. A job waiting for its parents is held: it is
    not queued when they are done, until `farm resume` puts it back to waiting (a parent that
    fails still cancels it). Returns the state the job was in."""
    ledger: JobControlLedger = Ledger.from_url(settings.redis_url)
    ledger.job_or_fail(job_id)
    move = ledger.pause_job(job_id, reason)
    if not move.moved and move.status != "same":
        raise FarmError(
            f"job {job_id} is {move.previous}; only waiting, queued or running jobs pause"
        )
    _keep(settings, job_id, state=JobState.PAUSED,
                   paused_reason=reason)  # fmt: skip
    return move.previous


def resume(
    settings: Settings, job_id: str, max_cost: float | None = None
) -> tuple[int, cost.Spend]:
    """Back to running (with a new budget if given) and every waiting chunk sent again; a job
    paused while it waited for its parents goes back to waiting, nothing sent (the reconciler
    queues it once they are done). Returns the chunks sent and the job's spend (over_budget: it
    will pause again at once)."""
    ledger: JobControlLedger = Ledger.from_url(settings.redis_url)
    job = ledger.job_or_fail(job_id)
    if job.get("state") == JobState.HELD:  # after its preview frames: the rest planned and sent
        return _release_held(settings, job_id, max_cost), ledger.spend(job_id)
    move = ledger.resume_job(job_id, max_cost)
    if not move.moved:
        hint = ""
        if move.previous == JobState.WAITING:
            hint = f": it runs once {job.get('after', '').replace(',', ', ')} end"
        raise FarmError(f"job {job_id} is {move.previous}; only paused jobs resume{hint}")
    budget = {} if max_cost is None else {"max_cost": max_cost}
    _keep(settings, job_id, state=move.target, paused_reason="", **budget)
    if move.target == JobState.WAITING:
        return 0, ledger.spend(job_id)
    return resend_waiting(settings, ledger, job_id), ledger.spend(job_id)


def _release_held(settings: Settings, job_id: str, max_cost: float | None) -> int:
    ledger = Ledger.from_url(settings.redis_url)
    dispatch = Dispatcher(make_app(settings), priority_of=ledger.priority)
    store = Store.from_settings(settings)
    return hold.release(ledger, store, dispatch, job_id, max_cost=max_cost)


def reprioritize(settings: Settings, job_id: str, priority: int) -> int:
    """`farm priority`: the job's waiting chunks are sent again at the new priority (the old
    messages, when they come up, find their chunk claimed or still waiting; either is fine)."""
    ledger: JobControlLedger = Ledger.from_url(settings.redis_url)
    job = ledger.job_or_fail(job_id)
    if job.get("state") in ENDED:
        raise FarmError(f"job {job_id} is {job['state']}: it has no chunk left to run")
    ledger.set_priority(job_id, priority)
    _keep(settings, job_id, priority=priority)
    if job.get("state") not in ("queued", "running"):
        return 0  # paused or waiting: its chunks are sent at the new priority when it runs
    return resend_waiting(settings, ledger, job_id)
