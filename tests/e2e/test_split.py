"""No idle tail on a real local farm: a worker with nothing to do splits the chunk another renders;
both render, no frame twice, and the video joins frame-exact in frame order.

The owner's Blender is held still (tests/e2e/hold.py) from its first frame until the split is
made, taken by the idle worker and heard by the owner: on a fast machine the owner would finish
the chunk before the idle worker had started, and there would be no tail to split."""

from __future__ import annotations

import itertools
import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from farm.core import keys
from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import frame_count, spawn_worker, status, submit, wait_final, wait_for
from tests.e2e.hold import held

pytestmark = pytest.mark.e2e


def _permits(farm: LocalFarm, worker: str, job_id: str) -> list[Path]:
    """The permit files `worker` wrote for the job: it heard of a split (workers.phases.frames)."""
    scratch = Path(farm.settings().get("scratch_dir") or tempfile.gettempdir())
    return list((scratch / "farm-worker" / worker / "jobs" / job_id).rglob("permit-*.json"))


def test_an_idle_worker_splits_the_running_chunk_and_the_video_has_every_frame_once(
    tmp_path: Path,
) -> None:
    farm = start_farm(tmp_path, workers=0)
    try:
        owner = spawn_worker(farm, "owner@test")
        job_id = submit(farm, DEMO, "--frames", "1-24", "--chunk-size", "24", "--samples", "16")
        wait_for(
            "the one chunk to render a frame",
            lambda: status(farm, job_id)["chunks"][0]["frames_rendered"] >= 1,
            120,
            farm,
        )
        ledger = farm.ledger()
        with held(owner):
            spawn_worker(farm, "idle@test")
            wait_for(
                "the idle worker to split the chunk and render the new one",
                lambda: any(
                    c["state"] == "rendering" and c["worker"] == "idle@test"
                    for c in ledger.chunks(job_id)
                ),
                180,
                farm,
            )
            wait_for(
                "the owner to hear of the split",
                lambda: bool(_permits(farm, "owner@test", job_id)),
                60,
                farm,
            )
        summary = wait_final(farm, job_id, 300)
        assert summary["state"] == "done", farm.logs()

        chunks = ledger.chunks(job_id)
        assert len(chunks) >= 2, "the idle worker never split the chunk"
        assert any(e["event"] == "split" for e in ledger.events(job_id))
        assert {c["worker"] for c in chunks} == {"owner@test", "idle@test"}
        # The owner's Blender heard of the split between frames and stopped; it was not restarted.
        owner_log = farm.store().get_bytes(keys.log_key(job_id, 0, 1, "render", 1)).decode()
        assert "FARM-STOPPED" in owner_log and owner_log.count("FARM-LOADED") == 1
        # Exactly once: every frame rendered by one Blender, none twice.
        assert ledger.render_counts(job_id) == {f: 1 for f in range(1, 25)}
        # Frame-exact: the chunks' frames, in first-frame order, are 1..24 with no gap or overlap,
        # and each segment's manifest lists the same frames.
        ordered = sorted(chunks, key=lambda c: json.loads(c["frames"])[0])
        assert [f for c in ordered for f in json.loads(c["frames"])] == list(range(1, 25))
        for chunk in chunks:
            manifest = farm.store().get_json(keys.chunk_manifest_key(job_id, chunk))
            assert [e["frame"] for e in manifest["frames"]] == json.loads(chunk["frames"])
        assert frame_count(farm, job_id, tmp_path) == 24
        pts = subprocess.run(
            ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
             "packet=pts_time", "-of", "csv=p=0", str(tmp_path / f"{job_id}.mp4")],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        times = sorted(float(t) for t in pts)
        assert len(times) == 24 and all(b > a for a, b in itertools.pairwise(times))
    finally:
        farm.down()
