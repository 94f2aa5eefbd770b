"""Chunks that keep failing, cancel and retry, and a Redis restart in the middle of a job."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import (
    frame_count,
    processes_mentioning,
    status,
    submit,
    wait_final,
    wait_for,
)

pytestmark = pytest.mark.e2e

# Geometry nodes, not Python (so -Y does not stop it): on one frame a grid asks for two billion
# vertices. Blender's allocation fails and it segfaults; the workers' memory cap makes that quick.
BOMB = """
import bpy, sys
bad_frame, out = int(sys.argv[-2]), sys.argv[-1]
bpy.ops.mesh.primitive_plane_add(size=0.1, location=(0, 0, -5))
tree = bpy.data.node_groups.new("Bomb", "GeometryNodeTree")
bpy.context.object.modifiers.new("Bomb", "NODES").node_group = tree
tree.outputs.new("NodeSocketGeometry", "Geometry")
nodes, links = tree.nodes, tree.links
time_node = nodes.new("GeometryNodeInputSceneTime")
cmp = nodes.new("FunctionNodeCompare")
cmp.data_type, cmp.operation = "FLOAT", "EQUAL"
cmp.inputs["B"].default_value, cmp.inputs["Epsilon"].default_value = float(bad_frame), 0.5
switch = nodes.new("GeometryNodeSwitch")
switch.input_type = "INT"
switch.inputs[4].default_value, switch.inputs[5].default_value = 2, 46000
grid = nodes.new("GeometryNodeMeshGrid")
links.new(time_node.outputs["Frame"], cmp.inputs["A"])
links.new(cmp.outputs["Result"], switch.inputs[0])
links.new(switch.outputs[1], grid.inputs["Vertices X"])
links.new(switch.outputs[1], grid.inputs["Vertices Y"])
links.new(grid.outputs["Mesh"], nodes.new("NodeGroupOutput").inputs[0])
bpy.ops.wm.save_as_mainfile(filepath=out)
"""


def _crashing_scene(tmp_path: Path, bad_frame: int) -> Path:
    scene = tmp_path / "crashes.blend"
    subprocess.run(
        ["blender", "--background", str(DEMO), "--python-expr", BOMB, "--", str(bad_frame), str(scene)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return scene


def test_a_scene_that_crashes_blender_fails_the_job_then_retry_finishes_it(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    scene = _crashing_scene(tmp_path, bad_frame=3)
    job_id = submit(local_farm, scene, "--frames", "1-6", "--chunk-size", "6", "--samples", "2")
    summary = wait_final(local_farm, job_id, 240)
    assert summary["state"] == "failed"
    # Chunk 0, unless an idle worker split frame 3 off into a chunk of its own (farm.core.split).
    crashed = next(
        int(c["index"]) for c in local_farm.ledger().chunks(job_id) if 3 in json.loads(c["frames"])
    )
    assert f"chunk {crashed} failed 3 times" in summary["error"]
    assert "Blender crashed (SIGSEGV) on frame 3" in summary["error"]
    text = local_farm.farm("status", job_id).stdout
    assert "failed" in text and "frame 3" in text

    attempts = local_farm.ledger().chunk(job_id, crashed)["attempt"]
    time.sleep(5)
    assert local_farm.ledger().chunk(job_id, crashed)["attempt"] == attempts  # no retry loop

    logs = local_farm.farm("logs", job_id, "--chunk", str(crashed), check=True).stdout
    assert logs.count(f"===== {crashed:05d}-render-attempt") == 3
    assert any(
        word in logs
        for word in ("Segmentation fault", "Calloc returns null", "Malloc returns null")
    )

    retried = local_farm.farm("retry", job_id, "--scene", str(DEMO), check=True)
    assert "requeued" in retried.stdout
    summary = wait_final(local_farm, job_id, 180)
    assert summary["state"] == "done", summary["error"]
    assert frame_count(local_farm, job_id, tmp_path) == 6
    counts = local_farm.ledger().render_counts(job_id)
    assert counts[1] == counts[2] == 1  # frames before the crash were kept through every attempt


def test_cancel_stops_every_process_and_retry_all_resumes(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    job_id = submit(local_farm, DEMO, "--frames", "1-40", "--chunk-size", "4", "--samples", "8")
    wait_for(
        "chunks to be rendering",
        lambda: sum(c["state"] == "rendering" for c in status(local_farm, job_id)["chunks"]) >= 2,
        120,
        local_farm,
    )
    wait_for("Blender to run for this job", lambda: bool(processes_mentioning(job_id)), 30)
    out = local_farm.farm("cancel", job_id, check=True)
    assert "cancelled" in out.stdout
    wait_for("Blender and ffmpeg of the job to end", lambda: not processes_mentioning(job_id), 6)
    states = {c["state"] for c in status(local_farm, job_id)["chunks"]}
    assert states <= {"cancelled", "done"}
    time.sleep(4)
    assert not processes_mentioning(job_id)
    assert {c["state"] for c in status(local_farm, job_id)["chunks"]} <= {"cancelled", "done"}
    assert status(local_farm, job_id)["state"] == "cancelled"

    kept = set(local_farm.ledger().frame_records(job_id))
    local_farm.farm("retry", job_id, "--all", check=True)
    summary = wait_final(local_farm, job_id, 300)
    assert summary["state"] == "done", summary["error"]
    assert frame_count(local_farm, job_id, tmp_path) == 40
    counts = local_farm.ledger().render_counts(job_id)
    assert all(counts[f] == 1 for f in kept)


def test_redis_restart_mid_job_delays_it_but_loses_nothing(tmp_path: Path) -> None:
    farm = start_farm(tmp_path, workers=2)
    restarted: subprocess.Popen[bytes] | None = None
    try:
        job_id = submit(farm, DEMO, "--frames", "1-32", "--chunk-size", "4", "--samples", "4")
        wait_for("a chunk to finish", lambda: status(farm, job_id)["chunks_done"] >= 1, 120, farm)
        pids = json.loads((farm.data / "farm-up.json").read_text())["pids"]
        import os

        os.kill(pids["redis"], signal.SIGTERM)
        time.sleep(6)
        restarted = subprocess.Popen(
            ["redis-server", str(farm.data / "redis" / "redis.conf")],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        summary = wait_final(farm, job_id, 300)
        assert summary["state"] == "done", summary["error"] + farm.logs()
        assert frame_count(farm, job_id, tmp_path) == 32
        assert sorted(farm.ledger().render_counts(job_id)) == list(range(1, 33))
    finally:
        farm.down()
        if restarted:
            restarted.terminate()
            restarted.wait(10)
