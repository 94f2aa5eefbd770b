"""Submitting a job: validate, store the scene once, record the job and its chunks, send the chunks."""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from farm import keys
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from farm.plan import plan_chunks
from farm.settings import Settings
from farm.spec import JobSpec
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
    chunks = plan_chunks(spec.frames, spec.chunk_size)
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
    ledger.create_job(job_id=job_id, spec=spec, chunks=chunks, scene_key=scene_key)
    dispatch = Dispatcher(make_app(settings))
    for chunk in chunks:
        dispatch.render(job_id, chunk.index)
    log.info("job %s: %d chunks sent", job_id, len(chunks))
    return Submitted(
        job_id=job_id,
        scene_key=scene_key,
        scene_uploaded=uploaded,
        chunks=len(chunks),
        frames=spec.frames.count,
    )
