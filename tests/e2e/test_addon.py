"""The Blender add-on farm_blender, headless in the bpy wheel (the farm's Blender): installed from
the zip `farm addon --path` builds, it estimates and submits the open scene as an artist, through
the farm's API, and its timer follows the job to the end on a real local farm, over HTTP and over
HTTPS (`farm up --tls`, the farm's own CA named in the add-on's preferences)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, LocalFarm
from tests.e2e.farmtools import frame_count

pytestmark = pytest.mark.e2e

# Run by the bpy wheel: a cube with an image texture from a PNG beside the .blend (a file the
# scene uses, which submit must trace and upload), in front of a camera, frames 1-6, 64x36.
BUILD = """
import sys
from pathlib import Path
import bpy

folder = Path(sys.argv[1])
bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 1
scene.cycles.use_denoising = False
scene.render.resolution_x, scene.render.resolution_y = 64, 36
scene.render.resolution_percentage = 100
scene.render.fps = 24
scene.frame_start, scene.frame_end = 1, 6
scene.world = bpy.data.worlds.new("World")
scene.world.color = (0.2, 0.3, 0.5)
texture = bpy.data.images.new("grid", 8, 8)
texture.generated_type = "COLOR_GRID"
texture.filepath_raw = str(folder / "grid.png")
texture.file_format = "PNG"
texture.save()
bpy.ops.mesh.primitive_cube_add(size=1.0)
cube = bpy.context.object
material = bpy.data.materials.new("grid")
material.use_nodes = True
node = material.node_tree.nodes.new("ShaderNodeTexImage")
node.image = bpy.data.images.load(str(folder / "grid.png"))
material.node_tree.links.new(
    node.outputs["Color"], material.node_tree.nodes["Principled BSDF"].inputs["Base Color"]
)
cube.data.materials.append(material)
cube.keyframe_insert("location", frame=1)
cube.location.x = 1.0
cube.keyframe_insert("location", frame=6)
bpy.ops.object.camera_add(location=(0, -4, 0), rotation=(1.5708, 0, 0))
scene.camera = bpy.context.object
bpy.ops.wm.save_as_mainfile(filepath=str(folder / "shot.blend"), relative_remap=True)
"""

# Run by the bpy wheel as an artist's Blender: install the add-on from its zip, set its
# preferences, and drive it as the panel's buttons would; what it saw goes to a JSON file.
ARTIST = """
import json
import sys
import time
import bpy

zip_path, scene, api_url, token, ca_file, out, follow_s = sys.argv[1:8]
seen = {}


def refused(operator):
    try:
        operator()
    except RuntimeError as exc:
        return str(exc)
    return ""


# No event loop headless: run the timer's callback as Blender would, until `done()` or the
# callback ends; the calls made.
def timer_until(done, limit_s):
    polls, deadline = 0, time.monotonic() + limit_s
    while time.monotonic() < deadline and not done():
        polls += 1
        wait = farm_blender.poll()
        if wait is None:
            break
        time.sleep(wait)
    return polls


# The operator run as its button runs it, then the timer until its `farm submit` ends: what
# was refused at once, or else what the panel then says went wrong ("" for nothing).
def asked(operator):
    said = refused(operator)
    timer_until(lambda: farm_blender.FOLLOWED.asking is None, float(follow_s))
    return said or farm_blender.FOLLOWED.message


bpy.ops.preferences.addon_install(filepath=zip_path)
bpy.ops.preferences.addon_enable(module="farm_blender")
import farm_blender

prefs = bpy.context.preferences.addons["farm_blender"].preferences
seen["token_subtype"] = prefs.bl_rna.properties["api_token"].subtype
prefs.api_url, prefs.api_token = api_url, "farm_not-a-token-of-this-farm"
prefs.ca_file = ca_file
seen["unsaved"] = refused(bpy.ops.farm.submit)  # the new file Blender starts with

bpy.ops.wm.open_mainfile(filepath=scene)
bpy.context.scene.frame_end = 4  # a change not saved yet: submit saves it first
seen["bad_token"] = asked(bpy.ops.farm.estimate)

prefs.api_token = token
seen["estimate_refused"] = asked(bpy.ops.farm.estimate)
seen["estimate"] = farm_blender.FOLLOWED.estimate
# Submit returns at once, before `farm submit` has answered (the UI does not wait): the job
# is known only once the timer has collected the answer, and a second submit meanwhile is
# refused by the button's poll.
seen["submit_refused"] = refused(bpy.ops.farm.submit)
seen["in_flight"] = farm_blender.FOLLOWED.asking is not None and not farm_blender.FOLLOWED.job_id
seen["timer"] = bpy.app.timers.is_registered(farm_blender.poll)
seen["second_submit"] = refused(bpy.ops.farm.submit)
timer_until(lambda: farm_blender.FOLLOWED.asking is None, float(follow_s))
seen["submitted"] = farm_blender.FOLLOWED.submitted
seen["job_id"] = farm_blender.FOLLOWED.job_id

# The timer follows the job until it ends.
seen["polls"] = timer_until(lambda: False, float(follow_s))
seen["summary"] = farm_blender.FOLLOWED.summary
seen["message"] = farm_blender.FOLLOWED.message
seen["progress"] = farm_blender.progress(farm_blender.FOLLOWED.summary)
seen["estimate_lines"] = farm_blender.estimate_lines(farm_blender.FOLLOWED.estimate)
with open(out, "w") as fh:
    json.dump(seen, fh)
"""


@pytest.fixture(params=["http", "https"])
def farm(request: pytest.FixtureRequest) -> LocalFarm:
    """The session's farm (http), or one of this module's with TLS."""
    found: LocalFarm = request.getfixturevalue(
        "local_farm" if request.param == "http" else "tls_farm"
    )
    return found


def _addon_zip(tmp_path: Path) -> Path:
    """`farm addon --path`, as an artist runs it on their machine."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    shown = subprocess.run(
        [sys.executable, "-m", "farm", "addon", "--path"],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    )  # fmt: skip
    return Path(shown.stdout.strip())


def _artist(local_farm: LocalFarm, name: str) -> str:
    """A new artist on the farm; their token."""
    added = local_farm.farm("user", "add", name, "--role", "artist", check=True)
    return added.stdout.strip()


def _blender(script: str, *args: str, env: dict[str, str], timeout_s: float) -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, *args],
        env=env, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_the_addon_estimates_submits_and_follows_a_scene_as_an_artist(
    farm: LocalFarm, tmp_path: Path
) -> None:
    """GIVEN the add-on installed into the bpy wheel from `farm addon --path`, its preferences
    holding the API URL and an artist's token, and Blender started where the farm's own config is
    set (FARM_CONFIG: its Redis password and store keys) WHEN the artist opens a scene, changes it
    without saving, estimates and submits it (each button returns at once, `farm submit` running
    on a thread), and the panel's timer runs THEN the estimate and the job have the changed range
    (saved first), the scene's texture went with it, the job ends done, owned by the artist, its
    video holds every frame, and the token is in no farm log."""
    name = f"ada-{uuid.uuid4().hex[:6]}"
    token = _artist(farm, name)
    settings = farm.settings()
    api_url, ca_file = settings["web_url"], settings.get("ca_file", "")
    assert api_url.startswith("https://" if ca_file else "http://")
    zip_path = _addon_zip(tmp_path)
    folder = tmp_path / "shots"
    folder.mkdir()
    blender_env = {
        **farm.env,  # FARM_CONFIG and test settings: the add-on must not pass them on
        "BLENDER_USER_SCRIPTS": str(tmp_path / "blender" / "scripts"),
        "BLENDER_USER_CONFIG": str(tmp_path / "blender" / "config"),
    }
    _blender(BUILD, str(folder), env=blender_env, timeout_s=300)
    seen_path = tmp_path / "seen.json"

    _blender(ARTIST, str(zip_path), str(folder / "shot.blend"), api_url, token, ca_file,
             str(seen_path), "600", env=blender_env, timeout_s=1500)  # fmt: skip

    seen: dict[str, Any] = json.loads(seen_path.read_text())
    # The token is typed into a password field; an unsaved file and a wrong token are refused
    # with what to do.
    assert seen["token_subtype"] == "PASSWORD"
    assert "save the scene as a .blend file first" in seen["unsaved"]
    assert "token" in seen["bad_token"].lower()
    # The estimate: the range as changed in Blender, saved before `farm submit` read the file.
    assert seen["estimate_refused"] == "" and seen["submit_refused"] == "", seen
    assert seen["estimate"]["frames"] == 4 and seen["estimate"]["chunks"] >= 1
    assert seen["estimate_lines"][0].startswith("Frames: 4 in ")
    # The job: submitted as the CLI submits (the texture traced and uploaded), then followed.
    job_id = seen["job_id"]
    assert seen["submitted"]["id"] == job_id and seen["submitted"]["frames_total"] == 4
    assert seen["submitted"]["assets"]["files"] == 1, seen["submitted"]
    assert seen["timer"] is True
    # Blender's UI went on while `farm submit` ran, and no second submit could start meanwhile.
    assert seen["in_flight"] is True
    assert "poll() failed" in seen["second_submit"], seen["second_submit"]
    summary = seen["summary"]
    assert summary["state"] == "done", (seen["message"], summary.get("error"), farm.logs())
    assert seen["progress"] == [4, 4] and seen["polls"] > 1
    assert summary["owner"] == name
    # On the farm: the artist's job, done, its video with every frame.
    job = farm.ledger().job(job_id)
    assert (job["state"], job["owner"]) == ("done", name)
    assert frame_count(farm, job_id, tmp_path) == 4
    for log in (farm.data / "logs").glob("*.log"):
        assert token not in log.read_text(errors="replace"), log.name
