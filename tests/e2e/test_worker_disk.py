"""A worker's disk after its jobs, on a real farm: a host that only renders keeps no frames once
they are in the store, and every worker's folder of a job goes once the job has ended, so a
worker that renders job after job for weeks does not fill its disk."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from farm.core import keys
from farm.core.state import ChunkState, JobState
from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import spawn_worker, submit, wait_for

pytestmark = pytest.mark.e2e

SWEEP = {"FARM_DISK_SWEEP_S": "1"}


def _scratch(farm: LocalFarm, name: str) -> Path:
    base = farm.settings().get("scratch_dir") or tempfile.gettempdir()
    return Path(base) / "farm-worker" / name


def test_render_only_hosts_keep_no_frames_and_ended_jobs_leave_no_folders(
    tmp_path: Path,
) -> None:
    farm = start_farm(tmp_path, workers=0)
    try:
        renderer = "render@disk"
        spawn_worker(farm, renderer, queues="render,stitch", **SWEEP)
        wait_for("the render worker", lambda: renderer in farm.ledger().workers(), 60, farm)
        job_id = submit(farm, DEMO, "--frames", "1-4", "--chunk-size", "2", "--samples", "1")
        ledger = farm.ledger()

        def rendered() -> bool:
            chunks = ledger.chunks(job_id)
            return bool(chunks) and all(c["state"] == ChunkState.RENDERED for c in chunks)

        wait_for("every chunk rendered, none encoded (no encoder yet)", rendered, 180, farm)
        folder = _scratch(farm, renderer) / "jobs" / job_id
        # The job waits for an encoder: its folder stays, its scene tree in it; its frames are
        # in the store and nowhere on this host.
        assert (folder / "tree" / DEMO.name).is_file()
        assert sorted(p.name for p in (folder / "frames").iterdir()) == []
        store = farm.store()
        records = ledger.frame_records(job_id)
        assert all(store.exists(keys.frame_key(job_id, f, records[f].writer)) for f in range(1, 5))

        encoder = "encode@disk"
        spawn_worker(farm, encoder, queues="encode", **SWEEP)
        wait_for("the job done", lambda: ledger.job(job_id)["state"] == JobState.DONE, 180, farm)
        assert store.exists(ledger.job(job_id)["output"])
        wait_for(
            "both workers' folders of the ended job gone",
            lambda: (
                not folder.exists() and not (_scratch(farm, encoder) / "jobs" / job_id).exists()
            ),
            30,
            farm,
        )
    finally:
        farm.down()
