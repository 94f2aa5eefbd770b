"""Encodes beside renders (workers.host.alongside) on a real local farm of one worker with the lane
turned on (FARM_ENCODE_ALONGSIDE=on; `auto` turns it on only where the encoder is NVENC): each
chunk's segment is encoded while the worker renders the next chunk, the video holds every frame
once, and the lane's attempts are charged only for their seconds with no render beside them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import frame_count, kill_group, spawn_worker, submit, wait_final, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def lane_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    farm = start_farm(
        tmp_path_factory.mktemp("alongside"), workers=1, extra_env={"FARM_ENCODE_ALONGSIDE": "on"}
    )
    try:
        wait_for("the worker", lambda: len(farm.ledger().workers()) == 1, 120, farm)
        yield farm
    finally:
        farm.down()


def _span(record: dict[str, float]) -> tuple[float, float]:
    return record["t"] - record["s"], record["t"]


def test_each_segment_is_encoded_while_the_next_chunk_renders(
    lane_farm: LocalFarm, tmp_path: Path
) -> None:
    out = lane_farm.farm(
        "submit", str(DEMO), "--frames", "1-8", "--chunk-size", "2", "--resolution", "64x36",
        "--samples", "1", "--fps", "24", "--json", check=True,
    )  # fmt: skip
    job_id = json.loads(out.stdout)["id"]
    assert wait_final(lane_farm, job_id, 240)["state"] == "done", lane_farm.logs()
    logs = [p.read_text() for p in (lane_farm.data / "logs").glob("worker*.log")]
    assert any("encodes beside renders" in text for text in logs)
    assert lane_farm.ledger().render_counts(job_id) == {f: 1 for f in range(1, 9)}
    assert frame_count(lane_farm, job_id, tmp_path) == 8

    records = [r for r in lane_farm.ledger().attempt_records(job_id) if r["end"] != "failed"]
    renders = {r["chunk"]: _span(r) for r in records if r["phase"] == "rendering"}
    encodes = {r["chunk"]: _span(r) for r in records if r["phase"] == "encoding"}
    assert sorted(renders) == sorted(encodes) == [0, 1, 2, 3]
    # Chunk k's encode ran while chunk k+1 rendered, on the one worker: they overlap in time.
    overlapping = [
        k
        for k in range(3)
        if encodes[k][0] < renders[k + 1][1] and renders[k + 1][0] < encodes[k][1]
    ]
    assert overlapping, (renders, encodes)
    # An encode's seconds beside a render are paid by that render; its seconds alone (the last
    # encode, or one that a short render waited for) at the instance's price, the render's.
    [price] = {round(r["cost"] / r["s"], 9) for r in records if r["phase"] == "rendering"}
    assert price > 0
    for k, (start, end) in encodes.items():
        beside = sum(max(min(end, b) - max(start, a), 0) for a, b in renders.values())
        cost = next(r["cost"] for r in records if r["phase"] == "encoding" and r["chunk"] == k)
        # Within 0.1 s: the worker times its attempts from the task's start to its end, a few
        # round trips wider than the ledger's claim-to-done windows used here.
        assert cost == pytest.approx((end - start - beside) * price, abs=0.1 * price), k
    assert not any(a < encodes[3][1] and encodes[3][0] < b for a, b in renders.values())


def _both_in_hand(farm: LocalFarm, job_id: str, worker: str) -> bool:
    """The worker holds one chunk's encode and another chunk's render at once."""
    held = {c.get("state") for c in farm.ledger().chunks(job_id) if c.get("worker") == worker}
    return {"encoding", "rendering"} <= held


def test_a_worker_killed_while_it_encodes_beside_a_render_loses_neither(tmp_path: Path) -> None:
    farm = start_farm(tmp_path, workers=0, extra_env={"FARM_ENCODE_ALONGSIDE": "on"})
    try:
        doomed = spawn_worker(farm, "doomed@test")
        # Chunks of 24 frames at 640x360: an encode long enough to be caught beside a render.
        job_id = submit(farm, DEMO, "--frames", "1-48", "--chunk-size", "24", "--resolution",
                        "640x360", "--samples", "1")  # fmt: skip
        deadline = time.monotonic() + 180
        while not _both_in_hand(farm, job_id, "doomed@test"):
            assert time.monotonic() < deadline, farm.logs()
            assert farm.ledger().job(job_id).get("state") != "done", "never caught both in hand"
            time.sleep(0.01)
        kill_group(doomed)
        encoding = next(c for c in farm.ledger().chunks(job_id) if c["state"] == "encoding")
        rendered = set(json.loads(encoding["frames"]))
        spawn_worker(farm, "rescuer@test")
        summary = wait_final(farm, job_id, 180)
        assert summary["state"] == "done", summary["error"]
        assert frame_count(farm, job_id, tmp_path) == 48
        counts = farm.ledger().render_counts(job_id)
        assert sorted(counts) == list(range(1, 49))
        # The killed encode's frames were kept: encoded again by the rescuer, not rendered again.
        assert all(counts[f] == 1 for f in rendered), counts
        again = farm.ledger().chunk(job_id, int(encoding["index"]))
        assert int(again["lost_leases"]) == 1 and again["worker"] == "rescuer@test"
    finally:
        farm.down()
