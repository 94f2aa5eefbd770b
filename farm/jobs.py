"""Submitting a job: validate, store the scene once, record the job and its chunks, send the chunks."""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from farm import keys
from farm.chunking import Pool, initial_plan
from farm.dispatch import Dispatcher, make_app
from farm.errors import FarmError
from farm.ledger import Ledger
from farm.settings import Settings
from farm.spec import JobKind, JobSpec
from farm.state import ChunkState
from farm.store import Store

log = logging.getLogger(__name__)


def new_job_id() -> str:
    """Sortable by submit time, unique without coordination: j-20261202-101500-3fa9c1."""
    return time.strftime("j-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Submitted:
    job_id: str
    scene_key: str
    scene_uploaded: bool
    chunks: int
    frames: int


def submit(settings: Settings, spec: JobSpec, source: Path) -> Submitted:
    """Everything past validation: nothing here runs until the spec is known to be good."""
    ledger = Ledger.from_url(settings.redis_url)
    ledger.ping()
    store = Store.from_settings(settings)
    store.check()
    suffix = source.suffix.lower() or ".bin"
    scene_key, digest, uploaded = store.put_content_addressed(
        source, lambda sha: keys.scene_key(sha, suffix)
    )
    job_id = new_job_id()
    render_workers = sum(1 for w in ledger.workers().values() if "render" in w.get("queues", []))
    pool = Pool(
        workers=max(render_workers, 1),
        interruption_per_h=settings.spot_interruption_per_h,
        detect_s=settings.recovery_bound_s,
    )
    measured = ledger.measurement(keys.r_measurement(scene_key, str(spec.resolution), spec.samples))
    chunks, plan = initial_plan(spec.frames, spec.chunk_size, pool, measured)
    store.put_json(
        keys.spec_key(job_id),
        {
            "id": job_id,
            "spec": spec.to_json(),
            "scene_key": scene_key,
            "scene_sha256": digest,
            "chunks": [list(c.frames) for c in chunks],
            "submitted": time.time(),
        },
    )
    ledger.create_job(job_id=job_id, spec=spec, chunks=chunks, scene_key=scene_key, plan=plan)
    dispatch = Dispatcher(make_app(settings))
    send = dispatch.transcode if spec.kind is JobKind.ENCODE else dispatch.render
    for chunk in chunks:
        send(job_id, chunk.index)
    log.info("job %s: %d chunks sent", job_id, len(chunks))
    return Submitted(
        job_id=job_id,
        scene_key=scene_key,
        scene_uploaded=uploaded,
        chunks=len(chunks),
        frames=spec.frames.count,
    )


def reopen(
    settings: Settings, job_id: str, *, every_unfinished: bool, scene: Path | None
) -> list[int]:
    """`farm retry`: back to running, with a fixed scene if given, and every waiting chunk sent
    again (a duplicate message is harmless: only one claim can win)."""
    ledger = Ledger.from_url(settings.redis_url)
    job = ledger.job(job_id)
    if not job:
        raise FarmError(f"no job {job_id}; `farm jobs` lists the jobs")
    if scene is not None:
        store = Store.from_settings(settings)
        scene_key, _, _ = store.put_content_addressed(
            scene, lambda sha: keys.scene_key(sha, ".blend")
        )
        ledger.call(
            "replace the scene", lambda: ledger.r.hset(keys.r_job(job_id), "scene_key", scene_key)
        )
        ledger.event(job_id, "scene-replaced", scene_key=scene_key)
    waiting = ledger.reopen_job(job_id, every_unfinished=every_unfinished)
    dispatch = Dispatcher(make_app(settings))
    kind = job.get("kind", "render")
    for chunk in ledger.chunks(job_id):
        index, state = int(chunk["index"]), chunk.get("state")
        if state in (ChunkState.QUEUED, ChunkState.INTERRUPTED):
            if kind == "encode":
                dispatch.transcode(job_id, index)
            else:
                dispatch.render(job_id, index)
        elif state == ChunkState.RENDERED:
            dispatch.encode(job_id, index)
    if ledger.try_start_stitch(job_id):
        dispatch.stitch(job_id)
    return waiting
