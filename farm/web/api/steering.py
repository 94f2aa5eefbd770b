"""The routes that steer a job (pause, resume, cancel, retry, priority) and hand out its files
(the video, frames and logs by presigned GET): farm.control.jobs does the work, as for the CLI."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from farm.control import fixes, jobs, packages
from farm.control.status import job_status
from farm.core import keys
from farm.core.naming import OutputPattern, scene_named
from farm.core.tiles import PASSES_EXT, is_tiled, passes_key
from farm.web.api.answers import Answer, bad_request
from farm.web.api.call import Call, Farm
from farm.web.api.validate import is_number

GET_EXPIRES_S = 600
"""A presigned GET of a video, frame or log: 10 minutes to start the download."""
_LOG = re.compile(r"^(\d{5})-[\w-]+\.log$")
_LEGACY_FRAME = re.compile(r"^(\d{6})[.]")


def _status(farm: Farm, call: Call, **more: Any) -> Answer:
    return Answer(200, {**job_status(farm.ledger, call.job_id), **more})


def pause(farm: Farm, call: Call) -> Answer:
    call.only()
    jobs.pause(farm.settings, call.job_id, f"paused by {call.who}")
    return _status(farm, call)


def resume(farm: Farm, call: Call) -> Answer:
    call.only("max_cost")
    max_cost = call.body.get("max_cost")
    if max_cost is not None and (not is_number(max_cost) or max_cost < 0):
        raise bad_request("max_cost must be a number of dollars, 0 or more, or null")
    sent, _ = jobs.resume(farm.settings, call.job_id, None if max_cost is None else float(max_cost))
    return _status(farm, call, sent=sent)


def cancel(farm: Farm, call: Call) -> Answer:
    call.only()
    unfinished = jobs.cancel(farm.settings, call.job_id)
    return _status(farm, call, unfinished=unfinished)


def retry(farm: Farm, call: Call) -> Answer:
    if "scene" in call.body:
        raise bad_request(
            "a fixed scene is not taken through the API: submit the fixed scene as a new job, "
            f"or run `farm retry {call.job_id} --scene FILE` on one of the farm's hosts"
        )
    if "frames" in call.body:
        return _fix(farm, call)
    call.only("every_unfinished")
    every = call.body.get("every_unfinished", False)
    if not isinstance(every, bool):
        raise bad_request("every_unfinished must be true or false")
    done = jobs.reopen(farm.settings, call.job_id, every_unfinished=every)
    remade = {str(k): why for k, why in done.remade.items()}
    return _status(farm, call, waiting=done.waiting, remade=remade)


def _fix(farm: Farm, call: Call) -> Answer:
    """`farm retry --frames` (farm.control.fixes): the fix as recorded, and the chunks waiting."""
    call.only("frames", "reason")
    frames, reason = call.body.get("frames"), call.body.get("reason", "")
    if not isinstance(frames, str) or not isinstance(reason, str):
        raise bad_request('frames must be a list like "12-14,40", and reason text')
    done = fixes.fix_frames(farm.settings, call.job_id, frames, reason=reason, by=call.who)
    return _status(farm, call, waiting=done.waiting, fix=done.fix.to_json())


def priority(farm: Farm, call: Call) -> Answer:
    call.only("priority")
    value = call.body.get("priority")
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
        raise bad_request("priority must be a whole number from 0 to 100 (higher runs first)")
    jobs.reprioritize(farm.settings, call.job_id, value)
    return _status(farm, call)


def _presigned(farm: Farm, key: str, name: str, size: int) -> dict[str, Any]:
    return {"name": name, "url": farm.store.presign_get(key, GET_EXPIRES_S), "size": size}


def output(farm: Farm, call: Call) -> Answer:
    """The video once the job is done, and with frames=1 every recorded frame's files as `farm
    fetch --frames` lays them out (farm.control.jobs.frame_files), each by presigned GET: the
    frames named as the scene's Output path names them (farm.core.naming), or as stored with
    the note saying why."""
    job_id, job = call.job_id, call.job
    video = None
    key = job.get("output", "")
    if call.query.get("version"):
        key = fixes.version_key(job, call.int_query("version", 0, 1, 1_000_000))
    elif job.get("state") != "done":
        key = ""
    if key and (size := farm.store.size(key)) is not None:
        video = _presigned(farm, key, f"{job_id}{PurePosixPath(key).suffix}", size)
    passes = None  # a tiled still's merged passes, beside its image (farm.core.tiles)
    if video and is_tiled(job.get("spec")) and (size := farm.store.size(passes_key(key))):
        passes = _presigned(farm, passes_key(key), f"{job_id}.{PASSES_EXT}", size)
    frames: list[dict[str, Any]] = []
    note = None
    if call.int_query("frames", 0, 0, 1):
        sizes = farm.store.sizes(keys.job_prefix(job_id))
        found = jobs.frame_files(farm.store, job_id, farm.ledger.frame_records(job_id))
        named = scene_named(job_id, OutputPattern.of_spec(job.get("spec")), found)
        note = named.note
        for key, path in named.files:
            if key in sizes:
                frames.append({
                    "frame": _frame_of(job_id, key),
                    **_presigned(farm, key, path.as_posix(), sizes[key]),
                })  # fmt: skip
    return Answer(200, {"video": video, "frames": frames, "note": note, "passes": passes,
                        "package": _package(farm, job) if video and not call.query.get("version")
                        else None})  # fmt: skip


def _package(farm: Farm, job: dict[str, str]) -> list[dict[str, Any]] | None:
    """A done ladder job's HLS/DASH package (farm.media.package): each file its index lists,
    with the size and SHA-256 `farm fetch` checks, by presigned GET; None without one."""
    prefix = job.get("package", "")
    if not prefix:
        return None
    return [
        {**_presigned(farm, prefix + file.name, file.name, file.size), "sha256": file.sha256}
        for file in packages.stored_files(farm.store, prefix)
    ]


def _frame_of(job_id: str, key: str) -> int | None:
    for prefix in (keys.masters_prefix(job_id), keys.file_outputs_prefix(job_id)):
        if key.startswith(prefix) and (placed := keys.in_frame_folder(key, prefix)):
            return placed[0]
    legacy = _LEGACY_FRAME.match(PurePosixPath(key).name)
    return int(legacy.group(1)) if legacy else None


def logs(farm: Farm, call: Call) -> Answer:
    """Each attempt's log (`farm logs`), by presigned GET; with chunk=N, that chunk's only."""
    chunk = call.query.get("chunk", "")
    if chunk and not chunk.isdigit():
        raise bad_request("chunk must be a chunk's index (0, 1, ...)")
    prefix = keys.job_prefix(call.job_id) + "logs/" + (f"{int(chunk):05d}-" if chunk else "")
    found = []
    for key, size in sorted(farm.store.sizes(prefix).items()):
        name = PurePosixPath(key).name
        if match := _LOG.match(name):
            found.append({"chunk": int(match.group(1)), **_presigned(farm, key, name, size)})
    return Answer(200, {"logs": found})
