"""The time to rebuild the ledger from the store, per 1,000 chunks: a bucket of its own on a farm's
store filled with synthetic jobs' records as the farm leaves them (spec.json as `farm submit`
writes it; done chunks' manifests and segments; stored frames with their sha256 metadata), then
`farm.control.rebuild.rebuild` into an empty Redis of its own, timed, its store requests counted.

Each job: 12 frames in chunks of 3; chunks 0 and 1 done, 2 frames of chunk 2 stored, chunk 3 not
begun: a farm caught half way.
"""

from __future__ import annotations

import hashlib
import logging
import math
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import scratch_redis
from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control.rebuild import rebuild
from farm.core import keys
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.ledger import Ledger

FRAMES, CHUNK = 12, 3
CHUNKS_PER_JOB = FRAMES // CHUNK
BUCKET = "soak-rebuild"
SEGMENT = b"\0" * 2048
"""About a 3-frame segment of the soak's scene."""


def _job(store: Store, job_id: str) -> int:
    """One job's records; how many objects were written."""
    spec = build_render_spec(
        source_name="greys.blend", frames=f"1-{FRAMES}", chunk_size=CHUNK, resolution="64x36",
        fps=24, samples=512, codec="h264",
    )  # fmt: skip
    store.put_json(keys.spec_key(job_id), {
        "id": job_id, "spec": spec.to_json(), "source_key": "scenes/greys.blend",
        "source_sha256": "0" * 64, "chunks": [list(c.frames) for c in plan_chunks(spec.frames, CHUNK)],
        "submitted": time.time(), "control": {"priority": "50", "chunk_size": str(CHUNK)},
    })  # fmt: skip
    written = 1
    for chunk in (0, 1):  # done: a segment and its manifest, and the chunk's frames
        frames = list(range(chunk * CHUNK + 1, chunk * CHUNK + CHUNK + 1))
        segment = keys.segment_key(job_id, chunk, 1)
        store.put_bytes(segment, SEGMENT)
        store.put_json(keys.manifest_key(job_id, chunk, keys.writer(chunk, 1)), {
            "job_id": job_id, "chunk": chunk, "attempt": 1, "frames": [{"frame": f} for f in frames],
            "frame_count": len(frames), "segment": {"key": segment, "size": len(SEGMENT)},
        })  # fmt: skip
        written += 2 + _frames(store, job_id, frames, keys.writer(chunk, 1))
    return written + _frames(store, job_id, [2 * CHUNK + 1, 2 * CHUNK + 2], keys.writer(2, 1))


def _frames(store: Store, job_id: str, frames: list[int], writer: str) -> int:
    for frame in frames:
        data = b"frame %d of %s" % (frame, job_id.encode())
        with tempfile.TemporaryFile() as fh:
            fh.write(data)
            store.put_open(keys.frame_key(job_id, frame, writer), fh,
                           metadata={keys.FRAME_SHA256: hashlib.sha256(data).hexdigest()})  # fmt: skip
    return len(frames)


def run(admin: Settings, chunks: int) -> dict[str, Any]:
    """At least `chunks` chunks' records (whole jobs) written, then rebuilt and timed."""
    store = Store.from_settings(admin.model_copy(update={"s3_bucket": BUCKET}))
    store.ensure_bucket()
    jobs = max(1, math.ceil(chunks / CHUNKS_PER_JOB))
    ids = [f"j-rebuild-{i:05d}" for i in range(jobs)]
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:  # the store client keeps 10 connections
        objects = sum(pool.map(lambda job_id: _job(store, job_id), ids))
    write_s = time.monotonic() - started
    requests = 0

    def count(**_: Any) -> None:
        nonlocal requests
        requests += 1

    store.s3.meta.events.register("before-send.s3", count)
    quiet = logging.getLogger("farm.control.rebuild")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # a warning a job: not what is timed
    try:
        with scratch_redis("farm-soak-rebuild-") as url:
            ledger = Ledger.from_url(url)
            started = time.monotonic()
            result = rebuild(ledger, store, None)
            seconds = time.monotonic() - started
            outcomes = {f.outcome for f in result.jobs}
            if outcomes != {"rebuilt"} or result.chunks != jobs * CHUNKS_PER_JOB:
                raise RuntimeError(f"the rebuild put back {result.chunks} chunks of "
                                   f"{jobs * CHUNKS_PER_JOB}: {result.lines()[-1]}")  # fmt: skip
            done = sum(int(ledger.job(j)["chunks_done"]) for j in ids)
    finally:
        quiet.setLevel(level)
    rebuilt = result.chunks
    return {
        "jobs": jobs,
        "chunks": rebuilt,
        "chunks_done": done,
        "objects": objects,
        "write_s": round(write_s, 1),
        "rebuild_s": round(seconds, 2),
        "s_per_1000_chunks": round(seconds / rebuilt * 1000, 2),
        "store_requests": requests,
        "store_requests_per_chunk": round(requests / rebuilt, 2),
        "note": f"{jobs} jobs of {FRAMES} frames in chunks of {CHUNK}, 2 chunks of each done and "
        "2 frames of a third stored; rebuilt into an empty Redis, no task sent (dispatch None)",
    }
