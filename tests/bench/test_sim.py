"""The simulator on its own (pure, fast): deterministic, bounded by the ideal, and driven by the
farm's retry policy and chunk sizing."""

from __future__ import annotations

import math
from dataclasses import replace

from bench.sim import Fleet, Sim, Workload, simulate
from bench.timeline import breakdown
from farm.adapters.settings import Settings
from farm.core.chunking import AUTO

WORK = Workload(frames=400, startup_s=10, frame_s=5, stitch_s=5)


def test_same_seed_same_outcome() -> None:
    fleet = Fleet(gpus=20, interruption_per_h=0.2)
    assert simulate(WORK, fleet, 10, seed=7) == simulate(WORK, fleet, 10, seed=7)


def test_no_run_beats_the_ideal_and_idle_gpus_are_paid_for() -> None:
    o = simulate(WORK, Fleet(gpus=20, boot_s=0), 10)
    assert o.makespan_s >= o.ideal_s == 400 * 5 / 20
    assert o.gpu_hours * 3600 >= 20 * o.makespan_s - 1e-6
    assert o.chunks == 40 and not o.failed


def test_a_scene_that_always_crashes_spends_max_attempts_with_backoff() -> None:
    o = simulate(replace(WORK, crash_p=1.0), Fleet(gpus=4), 10)
    assert o.failed.endswith(f"failed {Settings().max_attempts} times: Blender crashed")


def test_auto_probes_then_sizes_the_rest() -> None:
    o = simulate(WORK, Fleet(gpus=20), AUTO)
    assert o.policy == "auto" and o.chunk_size > 2 and o.chunks > 20


def test_encodes_beside_renders_take_no_render_time_and_end_the_job_sooner() -> None:
    work = replace(WORK, encode_startup_s=1.0, encode_frame_s=0.2)
    beside = simulate(work, Fleet(gpus=20), 10)
    after = simulate(work, Fleet(gpus=20, encode_alongside=False), 10)
    assert beside.breakdown.encode_s == 0 < after.breakdown.encode_s
    assert beside.makespan_s < after.makespan_s and not beside.failed


def test_an_encode_beside_a_render_lost_to_a_reclaim_is_done_again() -> None:
    work = replace(WORK, encode_startup_s=5.0, encode_frame_s=1.0)  # long encodes: often hit
    fleet = Fleet(gpus=20, interruption_per_h=20.0, max_lost_leases=50)
    hit: list[int] = []

    class Watched(Sim):
        def _on_reclaim(self, who: int, n: object) -> None:
            lane = self.inst[who].lane
            if self.inst[who].alive and lane is not None and lane.started <= self.now:
                hit.append(lane.chunk)
            super()._on_reclaim(who, n)

    for seed in range(1, 4):
        o = Watched(work, fleet, 10, seed).run()
        # It finishes only once every chunk's segment is encoded (then the stitch runs).
        assert not o.failed and o.makespan_s < math.inf
    assert hit  # encodes beside renders were cut short, and done again


def test_timeline_adds_up_a_chunk() -> None:
    events = [
        {"t": 100.0, "event": "submitted", "chunks": 1},
        {"t": 101.0, "event": "chunk-rendering", "chunk": 0},
        {"t": 111.0, "event": "chunk-rendered", "chunk": 0},
        {"t": 111.5, "event": "chunk-encoding", "chunk": 0},
        {"t": 113.5, "event": "chunk-done", "chunk": 0},
        {"t": 113.6, "event": "stitch-gate"},
        {"t": 114.6, "event": "job-done"},
    ]
    chunk = {
        "index": "0", "frame_count": "4", "fetch_s": "0.5", "render_s": "9.8",
        "blender_launch_s": "2", "scene_load_s": "1", "upload_s": "0.3",
        "gather_s": "0.1", "encode_s": "1.5", "segment_upload_s": "0.2",
    }  # fmt: skip
    out = breakdown({"chunk_size": "4"}, [chunk], events, 99.5, workers=1)
    part = out["per_chunk"][0]
    assert part["queue_wait"] == 1.0 and part["encode_wait"] == 0.5
    assert part["render_frames"] == 6.3 and part["ledger_other"] == 0.4
    assert out["stitch_s"] == 1.0 and out["submit_to_first_claim_s"] == 1.5
