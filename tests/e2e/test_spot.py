"""Spot notices from the instance metadata service: hand the chunk back at once, take no more."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import (
    frame_count,
    kill_group,
    processes_mentioning,
    spawn_worker,
    status,
    submit,
    wait_final,
    wait_for,
    wait_frames,
)
from tests.e2e.imds import FakeIMDS

pytestmark = pytest.mark.e2e


@pytest.fixture
def imds() -> Iterator[FakeIMDS]:
    server = FakeIMDS()
    yield server
    server.close()


@pytest.fixture(scope="module")
def spot_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    """A farm with no workers of its own, shared by the module's tests: each starts the workers
    it needs, and its checks read its own job's chunks, events and claims."""
    farm = start_farm(tmp_path_factory.mktemp("spot"), workers=0)
    yield farm
    farm.down()


@pytest.fixture
def empty_farm(spot_farm: LocalFarm) -> Iterator[LocalFarm]:
    """The module's farm; whatever workers a test started are killed after it, pass or fail."""
    yield spot_farm
    for worker in spot_farm.extra_workers:
        kill_group(worker)
    spot_farm.extra_workers.clear()


def _claims_by(farm: LocalFarm, job_id: str, worker: str) -> list[dict[str, object]]:
    return [
        e for e in farm.ledger().events(job_id)
        if e["event"] in ("chunk-rendering", "chunk-encoding") and e.get("worker") == worker
    ]  # fmt: skip


def test_interruption_notice_hands_the_chunk_back_at_once(
    empty_farm: LocalFarm, imds: FakeIMDS, tmp_path: Path
) -> None:
    farm = empty_farm
    spot = spawn_worker(farm, "spot@test", FARM_IMDS_URL=imds.url)
    job_id = submit(farm, DEMO, "--frames", "1-24", "--chunk-size", "24", "--samples", "8")
    wait_frames(farm, job_id, 2)
    imds.interrupt_in(8)  # 20 frames left will not fit: the worker must hand the chunk back
    wait_for(
        "the chunk to be marked interrupted",
        lambda: status(farm, job_id)["chunks"][0]["state"] == "interrupted",
        10,
        farm,
    )
    chunk = status(farm, job_id)["chunks"][0]
    assert (chunk["interruptions"], chunk["failures"]) == (1, 0)
    assert "interrupted" in farm.farm("status", job_id, check=True).stdout
    kept = set(farm.ledger().frame_records(job_id))
    assert len(kept) >= 2
    assert imds.tokenless_requests == 0  # IMDSv2 only: every read carried the session token

    rescuer = spawn_worker(farm, "rescuer@test")
    summary = wait_final(farm, job_id, 180)
    assert summary["state"] == "done", summary["error"]
    assert frame_count(farm, job_id, tmp_path) == 24
    counts = farm.ledger().render_counts(job_id)
    assert all(counts[f] == 1 for f in kept)
    assert len(_claims_by(farm, job_id, "spot@test")) == 1
    workers = farm.ledger().workers()
    assert workers["spot@test"]["draining"].startswith("spot terminate notice")
    for worker in (spot, rescuer):
        kill_group(worker)


def test_rebalance_recommendation_means_no_new_chunk_starts(
    empty_farm: LocalFarm, imds: FakeIMDS, tmp_path: Path
) -> None:
    farm = empty_farm
    imds.recommend_rebalance()
    leaving = spawn_worker(farm, "leaving@test", FARM_IMDS_URL=imds.url)
    wait_for(
        "the worker to report draining",
        lambda: bool(farm.ledger().workers().get("leaving@test", {}).get("draining")),
        60,
        farm,
    )
    staying = spawn_worker(farm, "staying@test")
    job_id = submit(farm, DEMO, "--frames", "1-8", "--chunk-size", "2", "--samples", "2")
    summary = wait_final(farm, job_id, 180)
    assert summary["state"] == "done", summary["error"]
    assert frame_count(farm, job_id, tmp_path) == 8
    assert _claims_by(farm, job_id, "leaving@test") == []
    assert {c["worker"] for c in summary["chunks"]} == {"staying@test"}
    for worker in (leaving, staying):
        kill_group(worker)


def test_sigterm_drains_the_worker_and_hands_its_chunk_back(
    empty_farm: LocalFarm, tmp_path: Path
) -> None:
    """GIVEN a worker mid-chunk WHEN it gets SIGTERM (docker stop, a scale-in) with no grace time
    THEN it stops Blender, hands the chunk back unspent and exits; another finishes the job."""
    farm = empty_farm
    leaving = spawn_worker(farm, "leaving@test", FARM_SHUTDOWN_GRACE_S="0")
    job_id = submit(farm, DEMO, "--frames", "1-24", "--chunk-size", "24", "--samples", "8")
    wait_frames(farm, job_id, 2)
    leaving.send_signal(signal.SIGTERM)  # the worker process alone, as `docker stop` does
    assert leaving.wait(60) == 0
    chunk = status(farm, job_id)["chunks"][0]
    assert (chunk["state"], chunk["interruptions"], chunk["failures"]) == ("interrupted", 1, 0)
    assert processes_mentioning(job_id) == []  # Blender went with it
    kept = set(farm.ledger().frame_records(job_id))
    assert len(kept) >= 2

    spawn_worker(farm, "rescuer@test")
    summary = wait_final(farm, job_id, 180)
    assert summary["state"] == "done", summary["error"]
    assert frame_count(farm, job_id, tmp_path) == 24
    counts = farm.ledger().render_counts(job_id)
    assert all(counts[f] == 1 for f in kept)
