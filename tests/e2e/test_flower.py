"""Flower shows the workers and a job's tasks, and only to the farm's credentials."""

from __future__ import annotations

import json
import time

import pytest
import requests

from tests.conftest import DEMO, LocalFarm

pytestmark = pytest.mark.e2e


def test_flower_refuses_without_credentials(local_farm: LocalFarm) -> None:
    url = local_farm.settings()["flower_url"]
    assert requests.get(f"{url}/api/workers", timeout=10).status_code == 401
    assert requests.get(f"{url}/api/workers", auth=("farm", "wrong"), timeout=10).status_code == 401


def test_flower_lists_workers_and_the_jobs_tasks(local_farm: LocalFarm) -> None:
    s = local_farm.settings()
    auth = (s["flower_user"], s["flower_password"])
    out = local_farm.farm(
        "submit", str(DEMO), "--frames", "1-4", "--chunk-size", "2", "--resolution", "320x180",
        "--samples", "2", "--wait", "--json", check=True,
    )  # fmt: skip
    job_id = json.loads(out.stdout)["id"]
    deadline = time.monotonic() + 60
    names: list[str] = []
    while time.monotonic() < deadline:
        workers = requests.get(
            f"{s['flower_url']}/api/workers?refresh=1", auth=auth, timeout=30
        ).json()
        tasks = requests.get(f"{s['flower_url']}/api/tasks", auth=auth, timeout=30).json()
        names = [t["name"] for t in tasks.values() if job_id in (t.get("kwargs") or "")]
        if len(names) >= 3 and len(workers) >= 2:
            break
        time.sleep(1)
    assert len(workers) >= 2 and all(name.startswith("worker") for name in workers)
    # One task per chunk: these workers can encode, so each makes its segment in the render
    # task (no second hop through the broker); then the one stitch.
    assert sorted(names) == sorted(["farm.render_chunk"] * 2 + ["farm.stitch_job"])
