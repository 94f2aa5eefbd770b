"""`farm up --workers 2` gives each worker its own CPUs, and each chunk's Blender runs on its
worker's CPUs with one render thread per CPU (two Blenders never fight over the same cores); a
worker's first chunk of the job runs on the ready Blender it started while idle, and its later
chunks on the Blender it already has with the scene open (workers.host.warm)."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest

from farm.adapters import cpus
from farm.control.local import worker_cpus
from tests.conftest import DEMO, LocalFarm
from tests.e2e.farmtools import wait_for

pytestmark = pytest.mark.e2e


def _allowed(pid: int) -> tuple[int, ...]:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Cpus_allowed_list:\s*(\S+)$", status, re.M)
    assert found, status
    return cpus.parse(found.group(1))


def test_each_worker_and_its_blender_run_on_their_own_cpus(local_farm: LocalFarm) -> None:
    shares = worker_cpus(2, pin=True)
    if shares is None:  # a one-CPU machine: the two workers share it, unpinned
        shares = [cpus.available()] * 2
    pids = json.loads((local_farm.data / "farm-up.json").read_text())["pids"]
    assert [_allowed(pids["worker1"]), _allowed(pids["worker2"])] == shares
    scratch = Path(local_farm.settings().get("scratch_dir") or tempfile.gettempdir())
    wait_for(
        "a ready Blender on each idle worker",
        lambda: len(list(scratch.glob("farm-worker/*/ready/*/tree"))) == 2,
        180,
        local_farm,
    )

    done = local_farm.farm(
        "submit", str(DEMO), "--frames", "1-4", "--chunk-size", "1", "--resolution", "64x36",
        "--samples", "1", "--wait", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + local_farm.logs()
    job_id = json.loads(done.stdout)["id"]
    logs = local_farm.farm("logs", job_id, check=True).stdout
    loaded = [json.loads(m) for m in re.findall(r"^FARM-LOADED \S+ (\{.*\})$", logs, re.M)]
    assert len(loaded) >= 4, logs
    for line in loaded:
        assert tuple(line["cpus"]) in shares, line
        assert line["threads"] == len(line["cpus"]), line
    # Each worker started no Blender for the job's 4 chunks: its first ran on its ready one, the
    # others found that warm, with the scene open (no load), and said so.
    chunks = local_farm.ledger().chunks(job_id)
    warm = [c for c in chunks if c.get("blender_warm") == "1"]
    ready = [c for c in chunks if c.get("blender_ready") == "1"]
    assert len(warm) >= len(chunks) - 2 and len(warm) + len(ready) == len(chunks), chunks
    assert len({c["rendered_by"] for c in ready}) == len(ready), ready  # one per worker
    # Only a Blender that has the scene open says warm (farm.blender.script's next_chunk), and it
    # opened nothing again. How fast a warm chunk starts is a timing: bench/overhead.py reports
    # each chunk's Blender launch beside a direct run.
    assert sum(1 for line in loaded if line.get("warm")) == len(warm), loaded
    assert all(line["load_s"] == 0 for line in loaded if line.get("warm")), loaded
