"""`submit --estimate`, `--chunk-size auto` and the simulator agree: one sizing rule (farm.core.chunking)
and one cost function (farm.core.cost.estimate) serve all three."""

from __future__ import annotations

import pytest

from bench.sim import Fleet, Workload, estimate, pool_of, simulate
from farm.core.chunking import AUTO, Measurement, initial_plan
from farm.core.cost import price_of
from farm.core.spec import FrameRange

CASES = [
    (Workload(frames=2000, startup_s=20.0, frame_s=30.0), Fleet(gpus=20), 0.0),
    (Workload(frames=2000, startup_s=20.0, frame_s=30.0), Fleet(gpus=20), 0.10),
    (Workload(frames=600, startup_s=5.0, frame_s=2.0), Fleet(gpus=4), 0.0),
    (Workload(frames=5000, startup_s=60.0, frame_s=10.0), Fleet(gpus=50), 0.05),
]


@pytest.mark.parametrize("splits", [False, True], ids=["whole", "split"])
@pytest.mark.parametrize(("work", "fleet", "rate"), CASES)
def test_estimate_plans_the_chunks_the_farm_and_the_simulator_use(
    work: Workload, fleet: Fleet, rate: float, splits: bool
) -> None:
    fleet = Fleet(gpus=fleet.gpus, interruption_per_h=rate)
    est = estimate(work, fleet, AUTO, splits)
    ran = simulate(work, fleet, AUTO, seed=3, remembered=True, splits=splits)
    m = Measurement(startup_s=work.startup_s, frame_s=work.frame_s)
    pool = pool_of(fleet, splits=splits)
    chunks, plan = initial_plan(FrameRange(first=1, last=work.frames), AUTO, pool, m)
    assert est.chunk_size == ran.chunk_size == int(plan["chunk_size"])
    assert est.chunks == ran.chunks - ran.splits == len(chunks)


@pytest.mark.parametrize("splits", [False, True], ids=["whole", "split"])
@pytest.mark.parametrize(("work", "fleet", "rate"), CASES)
def test_estimate_is_within_a_quarter_of_the_simulated_time_and_cost(
    work: Workload, fleet: Fleet, rate: float, splits: bool
) -> None:
    # The farm meters chunk attempts, not instance boots (a boot belongs to no job), while the
    # simulator bills each instance from launch: compare them on a fleet that is already up.
    fleet = Fleet(gpus=fleet.gpus, interruption_per_h=rate, boot_s=0.0)
    est = estimate(work, fleet, AUTO, splits)
    ran = simulate(work, fleet, AUTO, seed=3, remembered=True, splits=splits)
    simulated_cost = price_of(ran.gpu_hours * 3600, fleet.spot_price_h)
    # The makespan model leaves out what comes before the first chunk and after the last: the
    # simulated fleet boots (cold) and the stitch runs.
    assert est.makespan_s + fleet.boot_s + work.stitch_s == pytest.approx(ran.makespan_s, rel=0.25)
    assert est.cost_spot == pytest.approx(simulated_cost, rel=0.25)
