"""Projects sharing a real local farm of two workers (real Redis, SeaweedFS, Celery, Blender):
while two projects both have work, each gets its weight's share of the workers' time; a job of
a project over its quota is paused, saying why; an unknown project is refused at submit.

A project's share is read from the ledger's attempt records (each attempt's claim to its end,
render and encode alike), clipped to the stretch when both projects had work waiting: from the
second project's first claim to the last first claim of either project's planned chunks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import status, wait_final, wait_for

pytestmark = pytest.mark.e2e

SMALL = ["--resolution", "160x90", "--samples", "16", "--fps", "24"]
"""Frames that take a while to render beside Blender's start-up: chunks of similar length
whichever way a worker's turns fall (a chunk of the job a worker just ran starts on its warm
Blender, a shorter start that tiny frames would make most of the chunk)."""
CHUNKS = 40
"""Chunks of two frames per job: enough to keep both workers busy for a window of some twenty to
thirty-five turns each. The window's edges favour the second project by about a chunk (both
workers turn to it first, and the first runs out first, its last chunk cut by the window's
end): over a window this long, about 2 points of share."""


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    farm = start_farm(tmp_path_factory.mktemp("fair"), workers=2)
    try:
        wait_for("two workers", lambda: len(farm.ledger().workers()) == 2, 180, farm)
        yield farm
    finally:
        farm.down()


def _add(farm: LocalFarm, name: str, *flags: str) -> str:
    out = farm.farm("project", "add", name, *flags, check=True).stdout
    # Every worker takes the new project's queues (the broadcast, else its own catch-up).
    wait_for(
        f"both workers to take project {name}'s work",
        lambda: all(name in w.get("projects", []) for w in farm.ledger().workers().values()),
        120,
        farm,
    )
    return out


def _submit(farm: LocalFarm, project: str, chunks: int = CHUNKS) -> str:
    out = farm.farm(
        "submit", str(DEMO), *SMALL, "--frames", f"1-{2 * chunks}", "--chunk-size", "2",
        "--project", project, "--json", check=True,
    )  # fmt: skip
    job_id: str = json.loads(out.stdout)["id"]
    return job_id


def _claimed(farm: LocalFarm, job_id: str) -> bool:
    return any(c["attempt"] > 0 for c in status(farm, job_id)["chunks"])


def _spans(farm: LocalFarm, job_id: str) -> list[tuple[float, float, dict[str, Any]]]:
    """Each ended attempt of the job as (claimed, ended, record)."""
    records = farm.ledger().attempt_records(job_id)
    return [(float(r["t"]) - float(r["s"]), float(r["t"]), r) for r in records]


def _last_first_claim(farm: LocalFarm, job_id: str) -> float:
    """When the job's last planned chunk was first claimed: from then on the project had no
    chunk waiting (chunks a split added later do not count)."""
    planned = farm.planned_chunks(job_id)
    first: dict[int, float] = {}
    for start, _, record in _spans(farm, job_id):
        chunk = int(record["chunk"])
        if record["phase"] == "rendering" and chunk < planned:
            first[chunk] = min(first.get(chunk, start), start)
    assert len(first) == planned, f"{job_id}: {len(first)} of {planned} chunks rendered"
    return max(first.values())


def _shares(farm: LocalFarm, first: str, second: str) -> tuple[float, float]:
    """(the first job's share of the two jobs' worker time while both had work, the window's
    length in seconds)."""
    since = min(start for start, _, _ in _spans(farm, second))
    until = min(_last_first_claim(farm, first), _last_first_claim(farm, second))
    assert until > since, "the second job started after the first had nothing left waiting"

    def busy(job_id: str) -> float:
        spans = _spans(farm, job_id)
        return sum(max(min(end, until) - max(start, since), 0.0) for start, end, _ in spans)

    a, b = busy(first), busy(second)

    def turns(job_id: str) -> str:
        spans = [(s, e) for s, e, r in _spans(farm, job_id) if r["phase"] == "rendering"]
        inside = [e - s for s, e in spans if since <= s < until]
        return f"{len(inside)} turns of mean {sum(inside) / max(len(inside), 1):.2f} s"

    print(f"{first}: {a:.1f} s ({turns(first)}), {second}: {b:.1f} s ({turns(second)}) of "
          f"worker time in {until - since:.1f} s")  # fmt: skip
    return a / (a + b), until - since


def _run_pair(farm: LocalFarm, first_project: str, second_project: str) -> tuple[float, float]:
    first = _submit(farm, first_project)
    wait_for("the first job's first claim", lambda: _claimed(farm, first), 300, farm)
    second = _submit(farm, second_project)
    for job_id in (first, second):
        assert wait_final(farm, job_id, 1800)["state"] == "done"
    return _shares(farm, first, second)


@pytest.mark.timeout(3600)  # two jobs of 24 chunks on a loaded machine
def test_two_projects_of_equal_weight_share_the_workers_half_and_half(farm: LocalFarm) -> None:
    """GIVEN projects a and b of weight 1, and a's long job taking both workers
    WHEN b submits a job of the same size
    THEN while both have work, each gets within 15% of half the workers' time."""
    assert "weight 1" in _add(farm, "a", "--weight", "1")
    _add(farm, "b", "--weight", "1")
    share_a, window_s = _run_pair(farm, "a", "b")
    assert 0.425 <= share_a <= 0.575, f"a's share {share_a:.3f} over {window_s:.1f} s"
    rows = {r["name"]: r for r in json.loads(farm.farm("projects", "--json", check=True).stdout)}
    assert rows["a"]["jobs"] == rows["b"]["jobs"] == 1
    assert rows["a"]["gpu_hours"] > 0 and rows["a"]["jobs_live"] == 0
    assert rows["a"]["share_last_hour"] > 0 and rows["b"]["share_last_hour"] > 0


@pytest.mark.timeout(3600)
def test_a_project_of_weight_two_gets_about_two_thirds(farm: LocalFarm) -> None:
    """GIVEN light (weight 1) taking both workers, and heavy (weight 2)
    WHEN heavy submits a job of the same size
    THEN while both have work heavy gets about 2/3 of the workers' time: within 0.12 of it.
    The bound is looser than the equal test's (0.5 +- 0.075): the window is shorter (heavy's
    job runs out after some 20 turns a worker, where a and b shared some 35), and the turns come
    in threes (heavy, heavy, light), so where the window cuts a round moves the share by up to
    a turn in each worker's 20 (0.05 or so); and heavy's second turn in a row runs on the
    warm Blender its first left (workers.host.warm), a shorter start than light's, so its time
    is a little under its turns (0.66 of the time for 0.70 of the turns, measured). 0.5 (no
    weight at all) stays outside the bound."""
    _add(farm, "light", "--weight", "1")
    _add(farm, "heavy", "--weight", "2")
    share_light, window_s = _run_pair(farm, "light", "heavy")
    share_heavy = 1 - share_light
    said = f"heavy's share {share_heavy:.3f} over {window_s:.1f} s"
    assert abs(share_heavy - 2 / 3) <= 0.12, said


def test_a_project_over_its_quota_has_its_jobs_paused_with_the_reason(farm: LocalFarm) -> None:
    # 0.00001 GPU-hours is 0.036 s: the first chunk's attempt uses it up.
    _add(farm, "tight", "--quota-gpu-hours", "0.00001")
    job_id = _submit(farm, "tight", chunks=12)
    wait_for("the quota to pause the job",
             lambda: status(farm, job_id)["state"] == "paused", 300, farm)  # fmt: skip
    reason = farm.ledger().job(job_id)["paused_reason"]
    assert "quota: project tight used" in reason and "of its 1e-05 GPU-hours" in reason
    assert "`farm project set tight --quota-gpu-hours N`" in reason
    [row] = [r for r in json.loads(farm.farm("projects", "--json", check=True).stdout)
             if r["name"] == "tight"]  # fmt: skip
    assert row["over_quota"] and row["gpu_hours"] > 0.00001 and row["jobs_live"] == 1
    assert "tight (over quota)" in farm.farm("projects", check=True).stdout
    shown = farm.farm("status", job_id, check=True).stdout
    assert "paused" in shown


def test_an_unknown_project_is_refused_at_submit_with_the_command_that_creates_it(
    farm: LocalFarm,
) -> None:
    refused = farm.farm("submit", str(DEMO), *SMALL, "--frames", "1-2", "--project", "nope")
    assert refused.returncode == 2, refused.stderr
    assert "no project 'nope'; `farm project add nope --weight 1` creates it" in refused.stderr
    bad = farm.farm("project", "add", "Bad.Name")
    assert bad.returncode == 2 and "1 to 32 lowercase letters" in bad.stderr


def test_a_worker_that_missed_the_broadcast_takes_a_new_projects_work_by_itself(
    farm: LocalFarm,
) -> None:
    """GIVEN a project recorded with no broadcast to the workers (as if they were down then)
    WHEN their heartbeats next look at the ledger's projects
    THEN each consumes its queues, and a job of it runs to the end."""
    from farm.control.projects import Projects

    Projects(farm.ledger(), farm.store()).add("quiet")
    wait_for(
        "both workers to take project quiet's work by themselves",
        lambda: all("quiet" in w.get("projects", []) for w in farm.ledger().workers().values()),
        120,
        farm,
    )
    job_id = _submit(farm, "quiet", chunks=2)
    assert wait_final(farm, job_id, 600)["state"] == "done"
