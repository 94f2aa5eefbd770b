"""The scene as made, its compositing passes too: what a scene's File Output nodes write is kept
with each frame and comes back with `farm fetch --frames`, laid out as the nodes name it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LocalFarm, start_farm

pytestmark = pytest.mark.e2e

WIDTH, HEIGHT = 64, 36

# Run by the bpy wheel (the farm's Blender): a cube in front of a camera, frames 1-4, a node
# writing the beauty and the alpha as PNGs and a node writing one multilayer EXR with the depth.
BUILD = f"""
import sys
import bpy

bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 2
scene.cycles.use_denoising = False
scene.render.resolution_x, scene.render.resolution_y = {WIDTH}, {HEIGHT}
scene.render.resolution_percentage = 100
scene.frame_start, scene.frame_end = 1, 4
scene.world = bpy.data.worlds.new("World")
scene.world.color = (0.2, 0.3, 0.5)
bpy.ops.mesh.primitive_cube_add(size=1.0)
cube = bpy.context.object
cube.keyframe_insert("location", frame=1)
cube.location.x = 1.0
cube.keyframe_insert("location", frame=4)
bpy.ops.object.camera_add(location=(0, -4, 0), rotation=(1.5708, 0, 0))
scene.camera = bpy.context.object
scene.view_layers[0].use_pass_z = True
scene.use_nodes = True
tree = scene.node_tree
layers = tree.nodes["Render Layers"]
passes = tree.nodes.new("CompositorNodeOutputFile")
passes.name = "Passes"
passes.base_path = sys.argv[2] + "/passes/"
passes.format.file_format = "PNG"
passes.file_slots[0].path = "beauty_"
passes.file_slots.new("alpha_")
tree.links.new(layers.outputs["Image"], passes.inputs[0])
tree.links.new(layers.outputs["Alpha"], passes.inputs[1])
exr = tree.nodes.new("CompositorNodeOutputFile")
exr.name = "Layers"
exr.base_path = sys.argv[2] + "/layers_"
exr.format.file_format = "OPEN_EXR_MULTILAYER"
exr.layer_slots[0].name = "Image"
exr.layer_slots.new("Depth")
tree.links.new(layers.outputs["Image"], exr.inputs[0])
tree.links.new(layers.outputs["Depth"], exr.inputs[1])
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[1])
"""


def _rgb(path: Path) -> bytes:
    """The image's pixels as 8-bit RGB, decoded by ffmpeg as a viewer would."""
    done = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout


def test_file_output_passes_come_back_with_the_frames(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    """GIVEN a scene whose File Output nodes write a beauty and an alpha PNG and a multilayer EXR
    WHEN it renders in two chunks on the farm and is fetched with --frames THEN every frame's
    passes are there as the nodes name them, the beauty pass shows what the frame shows, and
    nothing the nodes were aimed at outside was written."""
    scene, outside = tmp_path / "comp.blend", tmp_path / "outside"
    subprocess.run([sys.executable, "-I", "-c", BUILD, str(scene), str(outside)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    result = local_farm.farm(
        "submit", str(scene), "--chunk-size", "2", "--wait", "--json", timeout=600
    )
    assert result.returncode == 0, result.stderr + local_farm.logs()
    summary = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    job_id = summary["id"]
    local_farm.farm("fetch", job_id, f"{tmp_path}/", "--frames", check=True)
    fetched = tmp_path / f"{job_id}-frames"
    passes = fetched / "file_output"
    names = sorted(str(p.relative_to(passes)) for p in passes.rglob("*") if p.is_file())
    assert names == sorted(
        [f"Passes/beauty_{f:04d}.png" for f in range(1, 5)]
        + [f"Passes/alpha_{f:04d}.png" for f in range(1, 5)]
        + [f"Layers{f:04d}.exr" for f in range(1, 5)]
    ), names
    for frame in range(1, 5):
        beauty = _rgb(passes / "Passes" / f"beauty_{frame:04d}.png")
        shown = _rgb(fetched / f"{frame:04d}.png")  # named by the scene's Output path, `/tmp/`
        assert len(beauty) == len(shown) == WIDTH * HEIGHT * 3
        assert sum(abs(a - b) for a, b in zip(beauty, shown, strict=True)) / len(shown) < 2
        head = (passes / f"Layers{frame:04d}.exr").read_bytes()[:4096]
        assert head[:4] == b"\x76\x2f\x31\x01" and b"Depth" in head  # multilayer, with the depth
    assert not outside.exists()


def test_file_output_files_over_the_per_frame_cap_fail_the_job_naming_the_setting(
    tmp_path: Path,
) -> None:
    """GIVEN a farm whose File Output cap is 1000 bytes a frame WHEN a scene whose nodes write
    more than that renders THEN the job fails on its first try, naming the cap, the bytes and
    the setting that raises it, and none of those files is stored."""
    scene, outside = tmp_path / "comp.blend", tmp_path / "outside"
    subprocess.run([sys.executable, "-I", "-c", BUILD, str(scene), str(outside)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    farm = start_farm(tmp_path, 1, {"FARM_FILE_OUTPUT_FRAME_MAX_BYTES": "1000"})
    try:
        result = farm.farm("submit", str(scene), "--wait", "--json", timeout=600)
        summary = json.loads(result.stdout)
        assert summary["state"] == "failed", farm.logs()
        assert re.search(
            r"frame 1: its File Output files are \d+ bytes, over the cap of 1000 bytes per "
            r"frame; raise file_output_frame_max_bytes \(FARM_FILE_OUTPUT_FRAME_MAX_BYTES\)",
            summary["error"],
        ), summary["error"]
        chunks = farm.ledger().chunks(summary["id"])
        assert max(int(c.get("failures", 0)) for c in chunks) == 1  # no try again: same bytes
        assert farm.store().keys(f"jobs/{summary['id']}/file_output/") == []
    finally:
        farm.down()
