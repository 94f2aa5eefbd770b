"""An auto-sized job's plan on a real Redis: the gate stays shut while the rest is unplanned,
the rest is added once, atomically, with the new total."""

from __future__ import annotations

import json

from farm.core import chunking
from farm.core.spec import FrameRange, build_render_spec
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger


def _auto_job(ledger: Ledger) -> tuple[chunking.Chunk, ...]:
    spec = build_render_spec(
        source_name="s.blend", frames="1-20", chunk_size="auto", resolution="320x180",
        fps=24, samples=4, codec="h264",
    )  # fmt: skip
    chunks, plan = chunking.initial_plan(spec.frames, spec.chunk_size, chunking.Pool(workers=2))
    ledger.create_job(job_id="ja", spec=spec, chunks=chunks, source_key="k", plan=plan)
    return chunks


def _finish(ledger: Ledger, index: int) -> None:
    render = ledger.move_chunk("ja", index, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk("ja", index, ChunkState.RENDERED, token=render.token)
    encode = ledger.move_chunk("ja", index, ChunkState.ENCODING, mode="claim", lease_s=30)
    assert ledger.move_chunk("ja", index, ChunkState.DONE, token=encode.token).moved


def test_gate_stays_shut_until_the_rest_is_planned_and_done(ledger: Ledger) -> None:
    probe = _auto_job(ledger)
    for chunk in probe:
        _finish(ledger, chunk.index)
    job = ledger.job("ja")
    assert job["chunks_done"] == job["chunks_total"] == "2"
    assert not ledger.try_start_stitch("ja")

    spec_frames = FrameRange(first=1, last=20)
    rest = list(chunking.rest_after(spec_frames, probe, chunk_size=8))
    assert ledger.plan_rest("ja", after=2, chunks=rest, chunk_size=8, reason="test")
    assert not ledger.plan_rest("ja", after=2, chunks=rest, chunk_size=8, reason="again")
    job = ledger.job("ja")
    assert (job["chunks_total"], job["plan_pending"], job["chunk_size"]) == ("4", "0", "8")
    assert [json.loads(c["frames"]) for c in ledger.chunks("ja")[2:]] == [
        list(range(5, 13)), list(range(13, 21))
    ]  # fmt: skip
    assert not ledger.try_start_stitch("ja")
    for chunk in rest:
        _finish(ledger, chunk.index)
    assert ledger.try_start_stitch("ja")
    assert ledger.job("ja")["state"] == JobState.STITCHING


def test_a_measurement_is_kept_for_the_next_job_of_the_scene(ledger: Ledger) -> None:
    m = chunking.Measurement(startup_s=3.5, frame_s=0.5, source="probe chunk 1 of ja")
    ledger.save_measurement("scenes/x.blend", m, resolution="320x180", samples=4)
    assert ledger.measurement("scenes/x.blend", resolution="320x180", samples=4) == m
    assert ledger.measurement("scenes/x.blend", resolution="320x180", samples=8) is None
