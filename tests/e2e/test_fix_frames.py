"""Frames fixed in place (`farm retry JOB --frames N`): a done job's bad frame is rendered again,
only the segment that holds it is encoded again, the video is stitched again and the video it
replaces is kept as version 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from farm.core import keys
from tests.conftest import DEMO, LocalFarm, ffprobe
from tests.e2e.farmtools import submit, wait_final
from tests.e2e.test_api_client import _client, _user

pytestmark = pytest.mark.e2e

SIZE = (64, 36)


def _pixels(path: Path, index: int = 0) -> np.ndarray:
    """Frame `index` of an image or video, decoded to RGB."""
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-vf", f"select=eq(n\\,{index})",
         "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(SIZE[1], SIZE[0], 3).astype(np.int16)


def _segments(farm: LocalFarm, job_id: str) -> dict[int, tuple[str, str]]:
    """Each chunk's segment as its manifest names it, and its ETag in the store now."""
    ledger, store = farm.ledger(), farm.store()
    found = {}
    for chunk in ledger.chunks(job_id):
        key = store.get_json(keys.chunk_manifest_key(job_id, chunk))["segment"]["key"]
        found[int(chunk["index"])] = (key, store.head(key)[1])
    return found


def test_a_fixed_frame_is_rendered_again_and_only_its_segment_is_made_again(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a done job of 12 frames in 3 chunks, whose frame 6 (chunk 1) went black in the store
    job_id = submit(local_farm, DEMO, "--frames", "1-12", "--chunk-size", "4",
                    "--resolution", "64x36", "--samples", "1")  # fmt: skip
    assert wait_final(local_farm, job_id, 300)["state"] == "done"
    ledger, store = local_farm.ledger(), local_farm.store()
    before = _segments(local_farm, job_id)
    first_video = tmp_path / "first.mp4"
    store.get_file(keys.output_key(job_id), first_video)
    black = tmp_path / "black.png"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "color=black:s=64x36",
                    "-frames:v", "1", str(black)], check=True)  # fmt: skip
    store.put_file(keys.frame_key(job_id, 6, ledger.frame_records(job_id)[6].writer), black)
    assert ledger.render_counts(job_id) == dict.fromkeys(range(1, 13), 1)

    # WHEN frame 6 is fixed
    fixed = local_farm.farm("retry", job_id, "--frames", "6", "--reason", "black frame",
                            check=True).stdout  # fmt: skip
    assert f"fixing {job_id} frames 6 (black frame)" in fixed, fixed
    assert "kept as version 1" in fixed, fixed
    assert wait_final(local_farm, job_id, 300)["state"] == "done"

    # THEN only frame 6 was rendered again, and only chunk 1's segment was made again
    assert ledger.render_counts(job_id) == {**dict.fromkeys(range(1, 13), 1), 6: 2}
    after = _segments(local_farm, job_id)
    assert (after[0], after[2]) == (before[0], before[2])
    assert after[1][0] != before[1][0]
    # the video is whole, and its frame 6 is a render again, not the black frame
    video = tmp_path / "fixed.mp4"
    store.get_file(keys.output_key(job_id), video)
    assert int(ffprobe(video)["streams"][0]["nb_read_frames"]) == 12
    rendered = _pixels(first_video, 5)
    assert np.abs(rendered).mean() > 10, "the demo's frame 6 is not black itself"
    assert np.abs(_pixels(video, 5) - rendered).mean() < 4
    # the video before the fix is kept as version 1, fetched by number; status says it all
    kept = local_farm.farm("fetch", job_id, str(tmp_path / "v1.mp4"), "--version", "1",
                           check=True)  # fmt: skip
    assert kept.returncode == 0
    assert (tmp_path / "v1.mp4").read_bytes() == first_video.read_bytes()
    shown = local_farm.farm("status", job_id, check=True).stdout
    assert "fixed   frames 6 at" in shown and "black frame" in shown, shown
    assert f"version 1 {keys.output_version_key(job_id, 1)}" in shown, shown
    refused = local_farm.farm("retry", job_id, "--frames", "13")
    assert refused.returncode == 2  # bad input: a usage error
    assert "--frames 13: not frames of the job, which renders frames 1-12" in refused.stderr


# Run by the bpy wheel (the farm's Blender): a glowing cube before a camera on black, hidden from
# the render at frame 2 only, so frame 2 comes out black.
BLACK_AT_2 = """
import sys
import bpy

bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 1
scene.cycles.use_denoising = False
scene.render.resolution_x, scene.render.resolution_y = 64, 36
scene.render.resolution_percentage = 100
scene.frame_start, scene.frame_end = 1, 4
bpy.ops.mesh.primitive_cube_add(size=1.5, rotation=(0.5, 0.3, 0.2))
cube = bpy.context.object
glow = bpy.data.materials.new("Glow")
glow.use_nodes = True
nodes = glow.node_tree.nodes
nodes.remove(nodes["Principled BSDF"])
emission = nodes.new("ShaderNodeEmission")
emission.inputs["Color"].default_value = (1.0, 0.6, 0.2, 1.0)
glow.node_tree.links.new(emission.outputs[0], nodes["Material Output"].inputs["Surface"])
cube.data.materials.append(glow)
for frame, hidden in ((1, False), (2, True), (3, False)):
    cube.hide_render = hidden
    cube.keyframe_insert("hide_render", frame=frame)
bpy.ops.object.camera_add(location=(0, -4, 0), rotation=(1.5708, 0, 0))
scene.camera = bpy.context.object
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[1])
"""


def test_check_frames_flags_a_black_frame_and_says_how_to_fix_it(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a scene whose frame 2 renders black
    scene = tmp_path / "blink.blend"
    subprocess.run([sys.executable, "-I", "-c", BLACK_AT_2, str(scene)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    # WHEN it is submitted with --check-frames
    job_id = submit(local_farm, scene, "--chunk-size", "2", "--resolution", "64x36",
                    "--check-frames")  # fmt: skip
    assert wait_final(local_farm, job_id, 300)["state"] == "done"
    # THEN frame 2 alone is flagged, in the ledger, in its chunk's manifest in the store, and in
    # `farm status` with the command that renders it again
    ledger, store = local_farm.ledger(), local_farm.store()
    chunk = ledger.chunk(job_id, 0)
    assert json.loads(chunk["flagged"]) == {"2": "black"}
    assert json.loads(ledger.chunk(job_id, 1)["flagged"]) == {}
    assert store.get_json(keys.chunk_manifest_key(job_id, chunk))["flagged"] == {"2": "black"}
    shown = local_farm.farm("status", job_id, check=True).stdout
    assert "flagged frames 2 (black)" in shown, shown
    assert f"fix them: farm retry {job_id} --frames 2" in shown, shown


def test_frames_are_fixed_through_the_api(
    local_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    # GIVEN an artist's done job, made through the API
    artist = _client(tmp_path_factory, "fixer")
    token = _user(local_farm, "cli-fixer", "artist")
    artist.ok("login", local_farm.settings()["web_url"], FARM_API_TOKEN=token)
    done = artist.ok("submit", str(DEMO), "--frames", "1-4", "--chunk-size", "2", "--resolution",
                     "64x36", "--samples", "1", "--wait", "--json")  # fmt: skip
    job_id = json.loads(done.stdout)["id"]
    first = Path(artist.ok("fetch", job_id, f"{tmp_path}/first.mp4").stdout.strip())
    # WHEN the artist fixes frame 3 through the API
    said = artist.ok("retry", job_id, "--frames", "3", "--reason", "a flicker").stdout
    assert f"fixing {job_id} frames 3 (a flicker)" in said, said
    assert wait_final(local_farm, job_id, 300)["state"] == "done"
    # THEN frame 3 alone was rendered again, status names the fix and its author, the new
    # video is whole and the one before is fetched as version 1
    assert local_farm.ledger().render_counts(job_id) == {1: 1, 2: 1, 3: 2, 4: 1}
    shown = artist.ok("status", job_id).stdout
    assert "fixed   frames 3 at" in shown and "by cli-fixer: a flicker" in shown, shown
    video = Path(artist.ok("fetch", job_id, f"{tmp_path}/fixed.mp4").stdout.strip())
    assert int(ffprobe(video)["streams"][0]["nb_read_frames"]) == 4
    kept = artist.ok("fetch", job_id, f"{tmp_path}/", "--version", "1").stdout.strip()
    assert kept == f"{tmp_path}/{job_id}.v1.mp4"
    assert Path(kept).read_bytes() == first.read_bytes()
    refused = artist.farm("retry", job_id, "--frames", "9")
    assert refused.returncode != 0 and "--frames 9: not frames of the job" in refused.stderr


# Run by the bpy wheel: a cube under an orange sky saved as EXR, its compositor multiplying the render by a value
# keyframed to NaN at frame 2, so frame 2's master holds NaN.
NAN_AT_2 = """
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
scene.render.image_settings.file_format = "OPEN_EXR"
scene.world = bpy.data.worlds.new("Sky")
scene.world.use_nodes = True
scene.world.node_tree.nodes["Background"].inputs[0].default_value = (0.8, 0.5, 0.2, 1.0)
bpy.ops.mesh.primitive_cube_add(size=1.0, rotation=(0.5, 0.3, 0.2))
bpy.ops.object.camera_add(location=(0, -4, 0), rotation=(1.5708, 0, 0))
scene.camera = bpy.context.object
scene.use_nodes = True
tree = scene.node_tree
times = tree.nodes.new("CompositorNodeMixRGB")
times.blend_type = "MULTIPLY"
value = tree.nodes.new("CompositorNodeValue")
for frame, number in ((1, 1.0), (2, float("nan"))):
    value.outputs[0].default_value = number
    value.outputs[0].keyframe_insert("default_value", frame=frame)
tree.links.new(tree.nodes["Render Layers"].outputs["Image"], times.inputs[1])
tree.links.new(value.outputs[0], times.inputs[2])
tree.links.new(times.outputs[0], tree.nodes["Composite"].inputs["Image"])
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[1])
"""


def test_check_frames_flags_nan_in_an_exr_master(local_farm: LocalFarm, tmp_path: Path) -> None:
    # GIVEN a scene written as EXR whose frame 2 holds NaN
    scene = tmp_path / "nan.blend"
    subprocess.run([sys.executable, "-I", "-c", NAN_AT_2, str(scene)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    # WHEN it is submitted with --check-frames
    job_id = submit(local_farm, scene, "--resolution", "64x36", "--check-frames")
    assert wait_final(local_farm, job_id, 300)["state"] == "done"
    # THEN frame 2 is flagged for its NaN, frame 1 is not
    flags = json.loads(local_farm.ledger().chunk(job_id, 0)["flagged"])
    assert set(flags) == {"2"} and flags["2"].startswith("NaN pixels ("), flags
    shown = local_farm.farm("status", job_id, check=True).stdout
    assert "flagged frames 2 (NaN pixels" in shown, shown
