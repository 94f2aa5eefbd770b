"""`farm retry` of a job whose stitch found a done chunk's segment gone from the store: that chunk
is made again, the others kept; a real Redis and a real SeaweedFS."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from farm.adapters.store import Store
from farm.control.jobs import reopen
from farm.core import keys
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger
from tests.integration.test_retry_scene import _settings


def _file(data: bytes) -> Path:
    path = Path(tempfile.mkdtemp()) / "segment.mp4"
    path.write_bytes(data)
    return path


def _done_job(ledger: Ledger, store: Store, job_id: str) -> None:
    """Two chunks done, each with its segment and manifest in the store, as workers leave them."""
    spec = build_render_spec(
        source_name="demo.blend", frames="1-8", chunk_size=4, resolution="64x36", fps=24,
        samples=1, codec="h264",
    )  # fmt: skip
    ledger.create_job(job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 4),
                      source_key="scenes/x")  # fmt: skip
    ledger.move_job(job_id, JobState.RUNNING)
    for index in (0, 1):
        key = keys.segment_key(job_id, index, 1)
        store.put_bytes(key, b"segment %d" % index)
        manifest = keys.manifest_key(job_id, index, keys.writer(index, 1))
        store.put_json(manifest, {"segment": {"key": key, "size": 9}})
        ledger.r.hset(keys.r_chunk(job_id, index), mapping={"state": ChunkState.DONE,
                                                            "manifest": manifest})  # fmt: skip
    ledger.r.hset(keys.r_job(job_id), "chunks_done", 2)


def test_a_done_chunk_whose_segment_is_gone_is_made_again_by_a_retry(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    """GIVEN a job that failed at the stitch: chunk 1's segment expired from the store WHEN it is
    retried THEN chunk 1 waits to be encoded again from its frames, with a fresh budget, chunk 0 stays done, the job runs
    with one chunk to go and says why in its events."""
    _done_job(ledger, store, "gone")
    store.delete(keys.segment_key("gone", 1, 1))
    ledger.r.hset(keys.r_chunk("gone", 1), "failures", 2)
    ledger.move_job("gone", JobState.FAILED, error="stitch: segment 1 is gone from the store")

    reopened = reopen(_settings(redis_url, store), "gone", every_unfinished=False)

    assert reopened.remade == {1: "its segment is gone from the store"}
    assert reopened.waiting == [1]
    job = ledger.job("gone")
    assert (job["state"], job["chunks_done"]) == (JobState.RUNNING, "1")
    assert [ledger.chunk("gone", i)["state"] for i in (0, 1)] == [
        ChunkState.DONE,
        ChunkState.RENDERED,
    ]
    assert ledger.chunk("gone", 1)["failures"] == "0"
    remade = [e for e in ledger.events("gone") if e["event"] == "chunk-remade"]
    assert [(e["chunk"], e["why"]) for e in remade] == [(1, "its segment is gone from the store")]


@pytest.mark.parametrize("damage", ["manifest", "size", "garbled", "etag"])
def test_a_chunk_whose_manifest_is_gone_or_segment_differs_is_made_again(
    ledger: Ledger, redis_url: str, store: Store, damage: str
) -> None:
    job_id = f"damaged-{damage}"
    _done_job(ledger, store, job_id)
    key = keys.segment_key(job_id, 0, 1)
    if damage == "manifest":
        store.delete(keys.manifest_key(job_id, 0, keys.writer(0, 1)))
    elif damage == "garbled":
        store.put_bytes(keys.manifest_key(job_id, 0, keys.writer(0, 1)), b"{not json")
    elif damage == "etag":  # the same size, other bytes: not the segment the manifest names
        etag = store.put_file(key, _file(b"segment 0"))
        store.put_json(
            keys.manifest_key(job_id, 0, keys.writer(0, 1)),
            {"segment": {"key": key, "size": 9, "etag": etag}},
        )
        store.put_bytes(key, b"segment X")
    else:
        store.put_bytes(key, b"cut")
    ledger.cancel_job(job_id)
    reopened = reopen(_settings(redis_url, store), job_id, every_unfinished=True)
    assert list(reopened.remade) == [0]
    said = {"manifest": "manifest is gone", "size": "3 bytes", "garbled": "cannot be read",
            "etag": "another ETag"}[damage]  # fmt: skip
    assert said in reopened.remade[0], reopened.remade


def test_a_running_jobs_done_chunk_is_never_remade(ledger: Ledger, store: Store) -> None:
    """Only a failed or cancelled job's chunks move: a running job's are the workers'."""
    _done_job(ledger, store, "running")
    assert not ledger.remake_chunk("running", 0, "its segment is gone", ChunkState.RENDERED)
    assert ledger.chunk("running", 0)["state"] == ChunkState.DONE
    assert ledger.job("running")["chunks_done"] == "2"
