"""Cost, estimate, budget, pause and resume, priorities and the live view on a real local farm of
one worker (real Redis, SeaweedFS, Celery and Blender; tiny renders of the demo scene)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from farm.control.estimate import measured
from farm.core.chunking import Measurement, choose_chunk_size
from farm.core.cost import estimate as estimate_cost
from farm.core.cost import load_prices
from farm.ledger.speeds import render_pool
from tests.conftest import DEMO, ROOT, LocalFarm, start_farm
from tests.e2e.farmtools import frame_count, status, wait_final, wait_for

pytestmark = pytest.mark.e2e

TINY = ["--resolution", "64x36", "--samples", "1", "--fps", "24"]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    farm = start_farm(tmp_path_factory.mktemp("cost"), workers=1)
    try:
        wait_for("the worker", lambda: len(farm.ledger().workers()) == 1, 120, farm)
        yield farm
    finally:
        farm.down()


def _submit(farm: LocalFarm, *args: str) -> str:
    out = farm.farm("submit", str(DEMO), *TINY, *args, "--json", check=True)
    job_id: str = json.loads(out.stdout)["id"]
    return job_id


def _status(farm: LocalFarm, job_id: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(farm.farm("status", job_id, "--json", check=True).stdout)
    return loaded


def test_every_attempt_is_priced_and_the_job_sums_them(one_worker: LocalFarm) -> None:
    job_id = _submit(one_worker, "--frames", "1-4", "--chunk-size", "2")
    assert wait_final(one_worker, job_id, 180)["state"] == "done"
    shown = _status(one_worker, job_id)["cost"]
    records = one_worker.ledger().attempt_records(job_id)
    assert shown["attempts"] == len(records) == 4  # two chunks, each rendered and encoded
    # `farm status --json` gives dollars to 6 places: a job of a few seconds costs $0.0003.
    assert shown["spent"] == pytest.approx(sum(r["cost"] for r in records), abs=5e-7)
    assert {r["where"] for r in records} == {"g5.xlarge:local"}
    assert shown["gpu_s_by_instance"]["g5.xlarge local"] == pytest.approx(shown["gpu_s"])
    assert shown["spent"] > 0 and shown["wasted"] == 0
    listing = one_worker.farm("jobs", check=True).stdout
    assert "cost" in listing and "wasted" in listing
    line = next(x for x in listing.splitlines() if x.startswith(job_id))
    assert "$0.0" in line
    text = one_worker.farm("status", job_id, check=True).stdout
    assert " spent, " in text and " wasted " in text
    assert "to go" not in text  # a done job has nothing to go


def test_status_wait_blocks_until_the_job_ends_with_submits_exit_codes(
    one_worker: LocalFarm,
) -> None:
    job_id = _submit(one_worker, "--frames", "1-2", "--chunk-size", "1")
    waited = one_worker.farm("status", job_id, "--wait", timeout=180)
    assert waited.returncode == 0, waited.stderr
    assert "done" in waited.stdout.splitlines()[0]
    cancelled = _submit(one_worker, "--frames", "1-40", "--chunk-size", "1")
    one_worker.farm("cancel", cancelled, check=True)
    assert one_worker.farm("status", cancelled, "--wait", timeout=60).returncode == 1
    assert one_worker.farm("status", cancelled, "--wait", "--json", timeout=60).returncode == 1
    # A plain retry of the cancelled job is refused before it touches the job's scene.
    source = one_worker.ledger().job(cancelled)["source_key"]
    plain = one_worker.farm("retry", cancelled, "--scene", str(DEMO.with_name("textured.blend")))
    assert plain.returncode == 1 and f"farm retry {cancelled} --all" in plain.stderr
    assert one_worker.ledger().job(cancelled)["source_key"] == source
    # Nothing to reprioritise in an ended job, and an unknown job is named as one.
    again = one_worker.farm("priority", job_id, "10")
    assert again.returncode == 1 and f"job {job_id} is done: it has no chunk left" in again.stderr
    unknown = one_worker.farm("logs", "j-nonesuch")
    assert unknown.returncode == 2 and "no job j-nonesuch" in unknown.stderr  # bad input


def test_a_budget_pauses_the_job_midway_and_resume_finishes_every_frame_once(
    one_worker: LocalFarm, tmp_path: Path
) -> None:
    # No frame has a price before the first is done (nothing was measured for this scene), so the
    # first chunk starts. $0.0001 is 0.36 GPU-seconds at g5.xlarge's $1.006/h: six frames at what
    # the first cost pass it on any machine (a fresh Blender alone takes over 0.06 s, and a warm
    # Blender's chunk took 0.15 s on a fast one, where $0.001 was not passed): the job pauses
    # after its first frames.
    job_id = _submit(one_worker, "--frames", "1-6", "--chunk-size", "1", "--max-cost", "0.0001")
    wait_for("the budget to pause the job",
             lambda: status(one_worker, job_id)["state"] == "paused", 120, one_worker)  # fmt: skip
    job = one_worker.ledger().job(job_id)
    assert "would pass the budget of $0.0001" in job["paused_reason"]
    time.sleep(3)  # running chunks finish; none starts
    settled = status(one_worker, job_id)
    assert 0 < settled["frames_rendered"] < 6
    started = [c for c in settled["chunks"] if c["attempt"] > 0]
    time.sleep(3)
    assert [c for c in status(one_worker, job_id)["chunks"] if c["attempt"] > 0] == started
    shown = one_worker.farm("status", job_id, check=True).stdout
    assert "paused" in shown and "budget $0.0001" in shown
    # A wait on a paused job ends, saying why and what to run, rather than waiting for ever.
    waited = one_worker.farm("status", job_id, "--wait", timeout=30)
    assert waited.returncode == 1, waited.stderr
    assert f"job {job_id} paused: budget: spent" in waited.stderr
    assert f"`farm resume {job_id} --max-cost N` continues" in waited.stderr
    resumed = one_worker.farm("resume", job_id, "--max-cost", "1", check=True)
    assert "resumed" in resumed.stdout
    assert wait_final(one_worker, job_id, 240)["state"] == "done"
    counts = one_worker.ledger().render_counts(job_id)
    assert counts == {f: 1 for f in range(1, 7)}
    assert frame_count(one_worker, job_id, tmp_path) == 6


def test_pause_lets_the_running_chunk_finish_and_resume_continues(
    one_worker: LocalFarm, tmp_path: Path
) -> None:
    job_id = _submit(one_worker, "--frames", "1-5", "--chunk-size", "1")
    wait_for("a chunk to start",
             lambda: any(c["attempt"] for c in status(one_worker, job_id)["chunks"]), 120)  # fmt: skip
    assert "paused" in one_worker.farm("pause", job_id, check=True).stdout
    wait_for("the running chunk to finish",
             lambda: not any(c["state"] == "rendering"
                             for c in status(one_worker, job_id)["chunks"]), 60)  # fmt: skip
    before = status(one_worker, job_id)
    time.sleep(4)
    after = status(one_worker, job_id)
    assert after["state"] == "paused"
    assert after["frames_rendered"] == before["frames_rendered"] < 5
    one_worker.farm("fetch", job_id, f"{tmp_path}/", "--frames", check=True)
    fetched = {
        int(found[-1])
        for p in (tmp_path / f"{job_id}-frames").iterdir()
        if (found := re.findall(r"\d+", p.stem))
    }
    assert len(fetched) == after["frames_rendered"] > 0
    one_worker.farm("resume", job_id, check=True)
    final = wait_final(one_worker, job_id, 240)
    assert final["state"] == "done"
    # The pause (over 4 s) is shown beside the elapsed time, and left out of the running time.
    assert final["paused_s"] >= 4 and final["active_s"] == round(
        final["elapsed_s"] - final["paused_s"], 2
    )
    assert "(paused 00:0" in one_worker.farm("status", job_id, check=True).stdout
    assert one_worker.ledger().render_counts(job_id) == {f: 1 for f in range(1, 6)}
    assert frame_count(one_worker, job_id, tmp_path) == 5


def test_a_rush_job_behind_a_hundred_chunk_job_starts_within_one_chunk(
    one_worker: LocalFarm,
) -> None:
    long_job = _submit(one_worker, "--frames", "1-100", "--chunk-size", "1")
    wait_for("the long job to start",
             lambda: any(c["attempt"] for c in status(one_worker, long_job)["chunks"]), 120)  # fmt: skip
    sent = time.time()
    rush = _submit(one_worker, "--frames", "1-1", "--chunk-size", "1", "--priority", "90")
    wait_for("the rush job to start",
             lambda: status(one_worker, rush)["chunks"][0]["attempt"] > 0, 120, one_worker)  # fmt: skip
    ledger = one_worker.ledger()
    rush_started = float(ledger.chunk(rush, 0)["started"])
    # From when the rush job was recorded, not from when its CLI started: starting the CLI
    # takes longer than these 1-frame chunks.
    sent = max(sent, float(ledger.job(rush)["created"]))
    one_worker.farm("cancel", long_job, check=True)
    long_chunks = [ledger.chunk(long_job, i) for i in range(100)]
    begun_between = [c for c in long_chunks if sent < float(c.get("started") or 0) < rush_started]
    renders = [r["s"] for r in ledger.attempt_records(long_job) if r["phase"] == "rendering"]
    chunk_s = max(renders)
    assert len(begun_between) <= 1, f"{len(begun_between)} long chunks started first"
    assert rush_started - sent <= chunk_s + 5.0
    assert sum(1 for c in long_chunks if c.get("started")) < 50


def test_estimate_prices_the_job_by_the_cost_model_that_meters_it(one_worker: LocalFarm) -> None:
    # GIVEN an estimate of a scene the farm has never timed (a probe job measures it)
    args = ["--frames", "1-24", "--resolution", "320x180", "--samples", "16", "--fps", "24"]
    out = one_worker.farm("submit", str(DEMO), *args, "--estimate", "--json", check=True)
    estimate = json.loads(out.stdout)
    assert estimate["probe_job"] and estimate["probe_cost"] > 0
    assert estimate["frames"] == 24
    queued_before = len(one_worker.ledger().job_ids())
    human = one_worker.farm("submit", str(DEMO), *args, "--estimate", check=True).stdout
    assert "cost" in human and "spot" in human and "on demand" in human
    # The probe's timings are remembered now: no second probe.
    assert not any(line.startswith("probe") for line in human.splitlines())
    assert len(one_worker.ledger().job_ids()) == queued_before  # nothing queued
    settings = one_worker.admin()
    ledger = one_worker.ledger()
    price = load_prices(settings.price_file).price(settings.region, settings.local_instance_type)
    pool = render_pool(settings, ledger)
    assert estimate["workers"] == pool.workers == 1
    # THEN its figures are the sizing rule and the cost model over the probe's measurement: the
    # arithmetic agrees to the JSON's rounding (timings to 3 places, dollars to 4).
    probed = Measurement(startup_s=estimate["startup_s"], frame_s=estimate["frame_s"])
    chunk_size = estimate["chunk_size"]
    assert choose_chunk_size(frames=24, m=probed, pool=pool).chunk_size == chunk_size
    priced = estimate_cost(frames=24, chunk_size=chunk_size, m=probed, pool=pool, price=price)
    assert estimate["chunks"] == priced.chunks
    assert estimate["cost_on_demand"] == pytest.approx(priced.cost_on_demand, abs=6e-5)
    assert estimate["cost_spot"] == pytest.approx(priced.cost_spot, abs=6e-5)
    # WHEN the job itself runs
    done = json.loads(one_worker.farm("submit", str(DEMO), *args, "--json", check=True).stdout)
    final = wait_final(one_worker, done["id"], 300)
    assert final["state"] == "done"
    assert final["chunk_size"] == str(chunk_size)  # sized by the same rule from the same timings
    spent = _status(one_worker, done["id"])["cost"]["spent"]
    # THEN the same model over the job's own timings, read from its chunks as the probe's were,
    # prices it at what its attempts were metered. Timings taken at one moment on both sides,
    # so machine load (the probe's timings against the job's, minutes apart) does not enter;
    # the model's shortcuts (a warm Blender's start-up paid once, the encodes folded into it)
    # stay well within a quarter, while per chunk for per frame, or spot prices for the
    # on-demand meter's, are off several times over.
    ran = measured(ledger.chunks(done["id"]), f"job {done['id']}")
    repriced = estimate_cost(frames=24, chunk_size=chunk_size, m=ran, pool=pool, price=price)
    assert repriced.cost_on_demand == pytest.approx(spent, rel=0.25), (ran, repriced, spent)


def test_watch_draws_the_job_and_its_chunks_in_a_real_terminal(one_worker: LocalFarm) -> None:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is missing; `make setup` installs it"
    job_id = _submit(one_worker, "--frames", "1-3", "--chunk-size", "1")
    session = f"watch-{job_id[-6:]}"
    command = f"{sys.executable} -m farm watch {job_id} --interval-s 0.5"
    env = [f"{k}={v}" for k, v in one_worker.env.items() if k.startswith(("FARM_", "PYTHON"))]
    env += ["COLUMNS=150", "LINES=40"]  # what rich sizes to, whatever the tmux server inherited
    subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "150", "-y", "40", "-c",
                    str(ROOT), *(a for kv in env for a in ("-e", kv)), command],
                   check=True)  # fmt: skip
    try:
        screens: list[str] = []

        def drawn() -> bool:
            screen = subprocess.run([tmux, "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True).stdout  # fmt: skip
            screens.append(screen)
            return screen.startswith("done") and f"job {job_id}" in screen and "worker1" in screen

        wait_for("watch to show the job done", drawn, 180, one_worker)
        screen = screens[-1]
        assert "chunk" in screen and "frames" in screen and "cost" in screen, screen
        chunk_lines = [line for line in screen.splitlines() if line.strip()[:1].isdigit()]
        assert len([line for line in chunk_lines if " done " in line]) >= 3, screen
        subprocess.run([tmux, "send-keys", "-t", session, "C-c"], check=True)
        wait_for("watch to end on Ctrl-C", lambda: subprocess.run(
            [tmux, "has-session", "-t", session], capture_output=True).returncode != 0, 20)  # fmt: skip
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)
