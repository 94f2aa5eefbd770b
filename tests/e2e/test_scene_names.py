"""`farm fetch --frames` writes each frame as the scene's Output path names it
(farm.core.naming), in direct mode and through the API; a job that recorded no Output path
(submitted before the farm recorded one) keeps the farm's names and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from farm.core import keys
from tests.conftest import LocalFarm
from tests.e2e.test_api_client import Client, _user

pytestmark = pytest.mark.e2e

# Run by the bpy wheel (the farm's Blender): a cube before a camera, frames 1-2, saved as EXR
# to `//render/shot010_####`.
BUILD = """
import sys
import bpy

bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 1
scene.cycles.use_denoising = False
scene.render.resolution_x, scene.render.resolution_y = 32, 18
scene.render.resolution_percentage = 100
scene.frame_start, scene.frame_end = 1, 2
scene.render.filepath = "//render/shot010_####"
scene.render.image_settings.file_format = "OPEN_EXR"
bpy.ops.mesh.primitive_cube_add(size=1.0)
bpy.ops.object.camera_add(location=(0, -4, 0), rotation=(1.5708, 0, 0))
scene.camera = bpy.context.object
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[1])
"""
NAMED = ["render/shot010_0001.exr", "render/shot010_0002.exr"]
EXR_MAGIC = b"\x76\x2f\x31\x01"


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def shot(local_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The scene, rendered on the farm: its job id."""
    scene = tmp_path_factory.mktemp("shot") / "shot010.blend"
    subprocess.run([sys.executable, "-I", "-c", BUILD, str(scene)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    done = local_farm.farm("submit", str(scene), "--wait", "--json", timeout=600)
    assert done.returncode == 0, done.stderr + local_farm.logs()
    summary = json.loads(done.stdout)
    assert summary["state"] == "done", summary["error"]
    return str(summary["id"])


def test_frames_come_back_named_as_the_scene_names_them(
    local_farm: LocalFarm, shot: str, tmp_path: Path
) -> None:
    # GIVEN the job's spec in the store (the record a rebuilt ledger reads) holds the pattern
    stored = local_farm.store().get_json(keys.spec_key(shot))["spec"]["scene"]
    assert (stored["output_path"], stored["file_extension"]) == ("//render/shot010_####", True)
    # WHEN it is fetched with --frames in direct mode
    done = local_farm.farm("fetch", shot, f"{tmp_path}/", "--frames", check=True)
    # THEN the frames are where the scene's Output path puts them, EXR, and nothing is said
    frames = tmp_path / f"{shot}-frames"
    assert _files(frames) == NAMED
    assert all((frames / name).read_bytes()[:4] == EXR_MAGIC for name in NAMED)
    assert done.stderr == ""


def test_frames_come_back_named_as_the_scene_names_them_through_the_api(
    local_farm: LocalFarm, shot: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN a wrangler's machine that knows the farm only by its API
    client = Client(tmp_path_factory.mktemp("wrangler"))
    token = _user(local_farm, "names-wrangler", "wrangler")
    client.ok("login", local_farm.settings()["web_url"], "--token-stdin", stdin=token + "\n")
    # WHEN it fetches the job's frames
    done = client.ok("fetch", shot, "out/", "--frames")
    # THEN they are named as in direct mode
    frames = client.home / "out" / f"{shot}-frames"
    assert _files(frames) == NAMED
    assert all((frames / name).read_bytes()[:4] == EXR_MAGIC for name in NAMED)
    assert done.stderr == ""


def test_a_job_that_recorded_no_pattern_keeps_the_farms_names_and_says_so(
    local_farm: LocalFarm, shot: str, tmp_path: Path
) -> None:
    # GIVEN the job's record as a farm before this release wrote it: no Output path
    ledger = local_farm.ledger()
    recorded = ledger.job(shot)["spec"]
    spec = json.loads(recorded)
    del spec["scene"]["output_path"], spec["scene"]["file_extension"]
    ledger.r.hset(keys.r_job(shot), "spec", json.dumps(spec))
    try:
        # WHEN it is fetched with --frames
        done = local_farm.farm("fetch", shot, f"{tmp_path}/", "--frames", check=True)
    finally:
        ledger.r.hset(keys.r_job(shot), "spec", recorded)
    # THEN the frames keep the names the farm stores them by, and one line says why
    assert _files(tmp_path / f"{shot}-frames") == ["frame_000001.exr", "frame_000002.exr"]
    assert done.stderr.splitlines() == [
        "frames named as the farm stores them (frame_000019.exr): job "
        f"{shot} was submitted before the farm recorded the scene's output path"
    ]
