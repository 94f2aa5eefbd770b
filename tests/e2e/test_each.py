"""`farm submit --each`: one scene made into sibling jobs, one per view layer (direct mode) and
one per camera named (through the API), each rendering only its layer or through its camera,
grouped, and fetched as a video of its own named after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import LocalFarm
from tests.e2e.test_api_client import Client, _user

pytestmark = pytest.mark.e2e

# Run by the bpy wheel: a red cube on the left, a blue one on the right, glowing (no light
# needed). View layer "Both" shows both, "BlueOnly" leaves the red one's collection out. The
# active camera "Wide" sees both cubes; "CamA" sees only the red one, "CamB" only the blue one;
# a marker at frame 1 switches to Wide (which --cameras overrides).
BUILD = """
import sys
import bpy

bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 1
scene.cycles.use_denoising = False
scene.render.resolution_x, scene.render.resolution_y = 64, 36
scene.render.resolution_percentage = 100
scene.frame_start, scene.frame_end = 1, 2
scene.view_settings.view_transform = "Standard"

def cube(name, x, rgb):
    collection = bpy.data.collections.new(name)
    scene.collection.children.link(collection)
    mat = bpy.data.materials.new(name)
    mat.use_nodes = True
    nodes = mat.node_tree.nodes
    nodes.clear()
    emit = nodes.new("ShaderNodeEmission")
    emit.inputs["Color"].default_value = (*rgb, 1.0)
    mat.node_tree.links.new(emit.outputs[0], nodes.new("ShaderNodeOutputMaterial").inputs[0])
    bpy.ops.mesh.primitive_cube_add(size=2.0, location=(x, 0, 0))
    obj = bpy.context.object
    obj.data.materials.append(mat)
    for owner in obj.users_collection:
        owner.objects.unlink(obj)
    collection.objects.link(obj)

cube("Red", -3, (1, 0, 0))
cube("Blue", 3, (0, 0, 1))
for name, x, y in (("Wide", 0, -16), ("CamA", -3, -6), ("CamB", 3, -6)):
    bpy.ops.object.camera_add(location=(x, y, 0), rotation=(1.5708, 0, 0))
    bpy.context.object.name = name
scene.camera = bpy.data.objects["Wide"]
scene.timeline_markers.new("cut", frame=1).camera = bpy.data.objects["Wide"]
scene.view_layers[0].name = "Both"
scene.view_layers.new("BlueOnly").layer_collection.children["Red"].exclude = True
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[1])
"""


def _colours(video: Path) -> tuple[int, int, int]:
    """(frames, red pixels, blue pixels) of the decoded video, summed over its frames."""
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(video), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    pixels = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(int)
    red = (pixels[:, 0] > 120) & (pixels[:, 2] < 80)
    blue = (pixels[:, 2] > 120) & (pixels[:, 0] < 80)
    return len(pixels) // (64 * 36), int(red.sum()), int(blue.sum())


def test_each_view_layer_and_each_camera_render_grouped_siblings_that_differ_as_they_should(
    local_farm: LocalFarm, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN a scene with two view layers, three cameras and a marker bound to one
    scene = tmp_path / "shot.blend"
    subprocess.run([sys.executable, "-I", "-c", BUILD, str(scene)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip

    # WHEN it is submitted with --each view-layer, waiting for every job
    done = local_farm.farm("submit", str(scene), "--each", "view-layer", "--chunk-size", "2",
                           "--wait", "--json", timeout=600)  # fmt: skip
    # THEN two jobs, one group, both done (exit 0), each rendering only its layer
    assert done.returncode == 0, done.stdout + done.stderr + local_farm.logs()
    made = json.loads(done.stdout)
    assert made["each"] == "view-layer"
    assert [j["member"] for j in made["jobs"]] == ["Both", "BlueOnly"]
    assert [j["state"] for j in made["jobs"]] == ["done", "done"]
    both, blue_only = (j["id"] for j in made["jobs"])
    local_farm.farm("fetch", both, f"{tmp_path}/out/", check=True)
    local_farm.farm("fetch", blue_only, f"{tmp_path}/out/", check=True)
    frames, red, blue = _colours(tmp_path / "out" / "shot.Both.mp4")
    assert (frames, red > 50, blue > 50) == (2, True, True)  # both cubes
    frames, red, blue = _colours(tmp_path / "out" / "shot.BlueOnly.mp4")
    assert (frames, red, blue > 50) == (2, 0, True)  # the red cube's collection left out

    # AND one's status names the group and its sibling, and `farm jobs` lists the group
    shown = local_farm.farm("status", blue_only, check=True).stdout
    assert f"group   {made['group']}: one job per view-layer, this one BlueOnly" in shown
    assert f"siblings {both} (Both, done)" in shown
    listed = local_farm.farm("jobs", check=True).stdout
    assert both in listed and blue_only in listed and "shot.blend (BlueOnly)" in listed
    assert made["group"].rsplit("-", 1)[-1] in listed

    # WHEN an artist's machine, through the API, submits a job per named camera
    client = Client(tmp_path_factory.mktemp("artist"))
    token = _user(local_farm, "each-artist", "artist")
    client.ok("login", local_farm.settings()["web_url"], "--token-stdin", stdin=token + "\n")
    done = client.farm("submit", str(scene), "--cameras", "CamA,CamB", "--wait", "--json")
    # THEN the markers' override is said, both jobs are done, and each saw what its camera sees
    assert done.returncode == 0, done.stdout + done.stderr + local_farm.logs()
    assert "markers switch cameras (Wide)" in done.stderr and "overridden" in done.stderr
    made = json.loads(done.stdout)
    assert [(j["member"], j["state"]) for j in made["jobs"]] == [("CamA", "done"), ("CamB", "done")]
    for job in made["jobs"]:
        client.ok("fetch", job["id"], "out/")
    frames, red, blue = _colours(client.home / "out" / "shot.CamA.mp4")
    assert (frames, red > 50, blue) == (2, True, 0)
    frames, red, blue = _colours(client.home / "out" / "shot.CamB.mp4")
    assert (frames, red, blue > 50) == (2, 0, True)

    # AND a camera the scene lacks is refused at submit, naming those it has
    refused = client.farm("submit", str(scene), "--cameras", "CamA,CamZ")
    assert refused.returncode == 2
    assert "no camera 'CamZ'; it has CamA, CamB, Wide" in refused.stderr
