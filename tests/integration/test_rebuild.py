"""The ledger rebuilt from the store (farm.control.rebuild), on a real Redis and a real SeaweedFS:
what the store holds of a job is put back as it stood, and a ledger that lost writes is noticed
by its mark."""

from __future__ import annotations

import hashlib
import json
import tempfile

import pytest

from farm.adapters.store import Store
from farm.control.rebuild import (
    MARK_COPY_EVERY,
    MarkWatch,
    Rebuilt,
    keep_spend,
    rebuild,
    record_control,
)
from farm.core import keys
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.ledger import Ledger


def _job(store: Store, job_id: str, *, frames: str = "1-12", chunk_size: int = 4) -> None:
    """A render job's record in the store as `farm submit` writes it."""
    spec = build_render_spec(
        source_name="s.blend", frames=frames, chunk_size=chunk_size, resolution="64x36", fps=24,
        samples=1, codec="h264",
    )  # fmt: skip
    store.put_json(keys.spec_key(job_id), {
        "id": job_id, "spec": spec.to_json(), "source_key": "scenes/abc.blend",
        "source_sha256": "abc", "chunks": [list(c.frames) for c in plan_chunks(spec.frames, 4)],
        "submitted": 1_700_000_000.0,
        "control": {"priority": "70", "max_cost": "12.5", "chunk_size": str(chunk_size)},
    })  # fmt: skip


def _frame(store: Store, job_id: str, frame: int, writer: str, *, record: bool = True) -> str:
    data = b"frame %d by %s" % (frame, writer.encode())
    digest = hashlib.sha256(data).hexdigest()
    key = keys.frame_key(job_id, frame, writer)
    with tempfile.TemporaryFile() as fh:
        fh.write(data)
        store.put_open(key, fh, metadata={keys.FRAME_SHA256: digest} if record else None)
    return digest


def _done_chunk(store: Store, job_id: str, chunk: int, claim: int, frames: list[int]) -> str:
    """A chunk's segment and its manifest, as an attempt leaves them."""
    segment = keys.segment_key(job_id, chunk, claim)
    store.put_bytes(segment, b"x" * 100)
    manifest = keys.manifest_key(job_id, chunk, keys.writer(chunk, claim))
    store.put_json(manifest, {
        "job_id": job_id, "chunk": chunk, "frames": [{"frame": f} for f in frames],
        "frame_count": len(frames), "segment": {"key": segment, "size": 100},
    })  # fmt: skip
    return manifest


@pytest.fixture
def clean(store: Store) -> Store:
    for key in store.keys(""):
        if key != "ready":
            store.delete(key)
    return store


def test_a_half_done_job_is_put_back_as_it_stood(ledger: Ledger, clean: Store) -> None:
    """GIVEN chunk 1 (frames 5-8) done, frames 1 and 2 stored, and a stale attempt's frame 9
    without a record WHEN the ledger is rebuilt THEN chunk 1 is done with its manifest, the others
    wait with their frames, frames 1, 2 and 5-8's records are back, priority and budget kept,
    and each chunk's next claim counts past every claim the store saw for its index."""
    _job(clean, "j1")
    manifest = _done_chunk(clean, "j1", 1, 3, [5, 6, 7, 8])
    sha = {f: _frame(clean, "j1", f, "1-3") for f in (5, 6, 7, 8)}
    sha |= {f: _frame(clean, "j1", f, "0-2") for f in (1, 2)}
    _frame(clean, "j1", 9, "2-7", record=False)  # no sha256 kept: rendered again

    result = rebuild(ledger, clean, None)

    assert [(f.job_id, f.outcome, f.chunks, f.chunks_done, f.frames_kept, f.frames_to_render)
            for f in result.jobs if f.why != "no spec.json"] == [("j1", "rebuilt", 3, 1, 2, 6)]  # fmt: skip
    job = ledger.job("j1")
    assert (job["state"], job["priority"], job["max_cost"]) == ("running", "70", "12.5")
    assert (job["chunks_total"], job["chunks_done"], job["source_key"]) == (
        "3", "1", "scenes/abc.blend",
    )  # fmt: skip
    chunks = ledger.chunks("j1")
    assert [(c["state"], json.loads(c["frames"]), c["manifest"]) for c in chunks] == [
        ("queued", [1, 2, 3, 4], ""),
        ("done", [5, 6, 7, 8], manifest),
        ("queued", [9, 10, 11, 12], ""),
    ]
    assert [c["claims"] for c in chunks] == ["2", "3", "7"]
    records = ledger.frame_records("j1")
    assert {f: (r.sha256, r.writer) for f, r in records.items()} == {
        f: (digest, "1-3" if f > 2 else "0-2") for f, digest in sha.items()
    }
    assert [e["event"] for e in ledger.events("j1")] == ["rebuilt"]


def test_a_job_in_the_ledger_gets_back_only_the_records_it_lost(
    ledger: Ledger, clean: Store
) -> None:
    """A ledger rolled back to before frame 3 was recorded: the job is left as it is, frame 3's
    record comes back from the store, and frame 1's (which the ledger kept) is not touched."""
    _job(clean, "j1")
    spec = build_render_spec(source_name="s.blend", frames="1-12", chunk_size=4,
                             resolution="64x36", fps=24, samples=1, codec="h264")  # fmt: skip
    ledger.create_job(job_id="j1", spec=spec, chunks=plan_chunks(spec.frames, 4), source_key="k")
    ledger.record_frame("j1", 1, 5, "kept", writer="0-1")
    _frame(clean, "j1", 1, "0-1")
    digest = _frame(clean, "j1", 3, "0-1")
    clean.put_bytes(keys.segment_key("j1", 0, 4), b"a segment of claim 4, lost with the ledger")

    result = rebuild(ledger, clean, None)

    assert [(f.outcome, f.frames_kept) for f in result.jobs if f.job_id == "j1"] == [("kept", 1)]
    records = ledger.frame_records("j1")
    assert records[1].sha256 == "kept" and records[3].sha256 == digest
    assert ledger.job("j1")["source_key"] == "k"
    # Chunk 0's next claim is 5: claim 4's names are taken in the store.
    assert [c.get("claims", "0") for c in ledger.chunks("j1")] == ["4", "0", "0"]


def test_ended_and_paused_jobs_stay_so_and_a_done_job_is_left_to_its_output(
    ledger: Ledger, clean: Store
) -> None:
    for job_id in ("cancelled", "failed", "paused", "done"):
        _job(clean, job_id)
    record_control(clean, "cancelled", state="cancelled")
    record_control(clean, "failed", state="failed", error="chunk 0 failed 3 times")
    record_control(clean, "paused", state="paused", paused_reason="over budget", priority=90)
    clean.put_bytes(keys.output_key("done"), b"video")

    result = rebuild(ledger, clean, None)

    # (SeaweedFS keeps the empty folders of earlier tests' jobs: they have no spec.)
    assert {f.job_id: (f.outcome, f.why) for f in result.jobs if f.why != "no spec.json"} == {
        "cancelled": ("ended", "cancelled"),
        "failed": ("ended", "failed"),
        "paused": ("rebuilt", ""),
        "done": ("done", keys.output_key("done")),
    }
    assert not ledger.job("cancelled") and not ledger.job("failed") and not ledger.job("done")
    paused = ledger.job("paused")
    assert (paused["state"], paused["paused_reason"], paused["priority"]) == (
        "paused", "over budget", "90",
    )  # fmt: skip


def test_a_manifest_that_cannot_be_trusted_leaves_its_chunk_to_run(
    ledger: Ledger, clean: Store
) -> None:
    """A manifest whose segment is gone, one whose segment is another size, and a stale
    attempt's whose frames another chunk's newer manifest covers: none makes a chunk done."""
    _job(clean, "j1")
    gone = _done_chunk(clean, "j1", 0, 1, [1, 2, 3, 4])
    clean.delete(clean.get_json(gone)["segment"]["key"])
    cut = _done_chunk(clean, "j1", 1, 1, [5, 6, 7, 8])
    clean.put_bytes(clean.get_json(cut)["segment"]["key"], b"short")
    newer = _done_chunk(clean, "j1", 2, 4, [9, 10, 11, 12])
    _done_chunk(clean, "j1", 2, 2, [9, 10, 11, 12])  # the stale attempt's, beside it

    rebuild(ledger, clean, None)

    chunks = ledger.chunks("j1")
    assert [(c["state"], c["manifest"]) for c in chunks] == [
        ("queued", ""), ("queued", ""), ("done", newer),
    ]  # fmt: skip


def test_a_ledger_that_lost_writes_is_noticed_by_its_mark(ledger: Ledger, clean: Store) -> None:
    """Each pass moves the ledger's mark on, and every MARK_COPY_EVERY passes (and after a
    rebuild) copies it into the store. A ledger that comes back empty (no mark) or rolled back
    (its mark behind the count the reconciler saw, or the store's copy) is rebuilt; one that lost
    nothing is not. A loss marks the ledger before the rebuild and once after it."""
    losses: list[str] = []

    def on_loss() -> Rebuilt:
        losses.append("rebuilt")
        return Rebuilt()

    def stored() -> int:
        return int(clean.get_json(keys.ledger_mark_key())["count"])

    watch = MarkWatch(ledger, clean, on_loss)
    watch.check()  # a new farm: no mark, nothing in the store to rebuild
    assert losses == ["rebuilt"] and stored() == 2
    for _ in range(3):
        assert watch.check() is None
    assert stored() == 2 and clean.get_json(keys.ledger_mark_key())["ledger"] == (
        ledger.mark().ledger  # type: ignore[union-attr]
    )  # not copied each pass
    assert ledger.mark().count == 5  # type: ignore[union-attr]

    ledger.r.hset(keys.r_ledger_mark(), "count", 3)  # an older snapshot, ahead of the copy
    assert watch.check() is not None
    assert losses == ["rebuilt"] * 2 and stored() == 7  # counted on past the count it saw

    ledger.r.flushall()  # an empty ledger; a second reconciler reads the store's copy
    again = MarkWatch(ledger, clean, on_loss)
    assert again.check() is not None
    assert losses == ["rebuilt"] * 3 and stored() == 9
    assert watch.check() is None  # the first reconciler sees the new mark move on
    for _ in range(MARK_COPY_EVERY - 1):
        assert again.check() is None
    assert stored() == 9 + MARK_COPY_EVERY  # copied after MARK_COPY_EVERY passes


def test_a_ledger_lost_during_its_rebuild_is_rebuilt_on_the_next_pass(
    ledger: Ledger, clean: Store
) -> None:
    """Found by the soak's review: Redis emptied between the pass reading the mark and moving
    it on would get a fresh mark past the store's copy, and the loss would go unseen."""
    passes: list[str] = []

    def wiped_meanwhile() -> Rebuilt:
        passes.append("rebuilt")
        if len(passes) == 2:
            ledger.r.flushall()  # lost again while this rebuild ran
        return Rebuilt()

    watch = MarkWatch(ledger, clean, wiped_meanwhile)
    watch.check()
    ledger.r.flushall()
    watch.check()  # rebuilds; the ledger is emptied during it: not marked over
    assert ledger.mark() is None
    watch.check()  # so the next pass sees it and rebuilds again
    assert passes == ["rebuilt"] * 3 and ledger.mark() is not None


def test_a_rebuilt_job_counts_its_budget_on_from_its_spend_as_last_kept(
    ledger: Ledger, clean: Store
) -> None:
    """The reconciler keeps each live job's spend in the store; a job rebuilt from it has spent
    what it had (the attempts running then ended with the ledger: their accrual is dropped), so
    its budget is not spent twice."""
    _job(clean, "j1")
    spec = build_render_spec(source_name="s.blend", frames="1-12", chunk_size=4,
                             resolution="64x36", fps=24, samples=1, codec="h264")  # fmt: skip
    ledger.create_job(job_id="j1", spec=spec, chunks=plan_chunks(spec.frames, 4), source_key="k")
    ledger.r.hset(keys.r_cost("j1"), mapping={"cost": "3.25", "gpu_s": "900", "attempts": "2",
                                              "run_per_s": "0.01", "run_base": "17000000"})  # fmt: skip
    kept: dict[str, dict[str, str]] = {}
    assert keep_spend(ledger, clean, ["j1"], kept) == ["j1"]
    assert keep_spend(ledger, clean, ["j1"], kept) == []  # unchanged: not written again
    ledger.r.flushall()

    rebuild(ledger, clean, None)

    assert ledger.cost_record("j1") == {"cost": "3.25", "gpu_s": "900", "attempts": "2"}
    assert ledger.spend("j1").spent == 3.25
