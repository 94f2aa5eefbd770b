"""`farm submit --frames 9 --tiles N`: one still rendered as tiles on the local farm's workers and
merged by its stitch, compared pixel by pixel with the same frame rendered whole; and what cannot
be tiled, refused at submit by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import requests

from farm.blender.tilemerge import read_exr
from farm.core import keys
from farm.core.tiles import tile_rects
from tests.conftest import LocalFarm
from tests.e2e.farmtools import wait_final
from tests.integration.test_tiles_render import HEIGHT, WIDTH, build_scene, pixels, render_whole

pytestmark = pytest.mark.e2e

# Run by the bpy wheel: the scene's frame 9 rendered whole, every pass saved in a multilayer EXR.
WHOLE_PASSES = """
import sys
import bpy

bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
scene = bpy.context.scene
scene.frame_set(9)
image = scene.render.image_settings
image.file_format, image.color_depth, image.exr_codec = "OPEN_EXR_MULTILAYER", "32", "ZIP"
bpy.ops.render.render(write_still=False, scene=scene.name)
bpy.data.images["Render Result"].save_render(sys.argv[2], scene=scene)
"""
PASSES = ("Depth.Z", "Normal.X", "Normal.Y", "Normal.Z", "Combined.R", "Combined.A")


def whole_passes(scene: Path, tmp: Path) -> dict[str, numpy.ndarray]:
    out = tmp / "whole.passes.exr"
    argv = [sys.executable, "-I", "-c", WHOLE_PASSES, str(scene), str(out)]
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    return read_exr(str(out))[1]


def test_a_tiled_still_is_the_frame_rendered_whole(local_farm: LocalFarm, tmp_path: Path) -> None:
    # GIVEN a 128x96 scene without denoising, its view layer rendering Depth and Normal too, its
    # frame 9 rendered whole by the render script (and by Blender with every pass)
    scene = build_scene(tmp_path, samples=4, denoise=False, passes=True)
    whole = pixels(render_whole(scene, tmp_path), tmp_path)
    whole_layers = whole_passes(scene, tmp_path)

    # WHEN it is submitted as a still in 4 tiles, waiting for it
    done = local_farm.farm("submit", str(scene), "--frames", "9", "--tiles", "4", "--wait",
                           "--json", timeout=600)  # fmt: skip
    # THEN the job is done: 4 tile chunks, one image in the scene's format (PNG), no video
    assert done.returncode == 0, done.stdout + done.stderr + local_farm.logs()
    summary = json.loads(done.stdout)
    job_id = summary["id"]
    assert summary["state"] == "done" and summary["chunks_total"] == 4
    assert summary["output"] == f"jobs/{job_id}/output.png"
    assert summary["settings"]["tiles"]["value"] == 4
    assert summary["settings"]["frames"]["value"] == "9"

    # AND `farm fetch` gives that image, of the frame's size and pixels, and its passes beside it
    fetched = local_farm.farm("fetch", job_id, f"{tmp_path}/out/", check=True).stdout.split()
    still, passes = (Path(line) for line in fetched[-2:])
    assert still == tmp_path / "out" / f"{job_id}.png" and still.is_file()
    assert passes == tmp_path / "out" / f"{job_id}.passes.exr" and passes.is_file()
    merged = pixels(still, tmp_path)
    assert merged.shape == whole.shape == (HEIGHT, WIDTH, 4)
    diff = numpy.abs(merged - whole)
    assert float(diff.mean()) < 1 / 255
    # AND no seam: the rows and columns either side of each tile edge are as close as the rest
    rects = tile_rects(4, WIDTH, HEIGHT)
    rows = {r.y0 for r in rects if r.y0} | {r.y0 - 1 for r in rects if r.y0}
    cols = {r.x0 for r in rects if r.x0} | {r.x0 - 1 for r in rects if r.x0}
    assert rows and cols
    for row in rows:
        assert float(diff[row].mean()) < 2 / 255, f"seam at row {row}"
    for col in cols:
        assert float(diff[:, col].mean()) < 2 / 255, f"seam at column {col}"

    # AND the passes are the whole frame's, merged from the tiles: every pass Blender saves of
    # the frame (Depth, Normal, ...) under its names, each pixel as rendered whole (Cycles seeds
    # a pixel's samples by the pixel, so a region renders its pixels exactly as the frame does)
    layers = read_exr(str(passes))[1]
    assert set(layers) == set(whole_layers)
    for name in PASSES:
        tiled, alone = layers[f"ViewLayer.{name}"], whole_layers[f"ViewLayer.{name}"]
        assert tiled.shape == (HEIGHT, WIDTH) and tiled.dtype == numpy.float32
        assert numpy.array_equal(tiled, alone), (name, float(numpy.abs(tiled - alone).max()))
    assert float(numpy.ptp(layers["ViewLayer.Depth.Z"])) > 0  # a real pass, not one value

    # AND `farm status` shows it as a still in tiles
    shown = local_farm.farm("status", job_id, check=True).stdout
    assert "still: frame 9 in 4 tiles" in shown
    # AND the job page shows the image (served by the page's server), not a video
    s = local_farm.settings()
    auth = (s["flower_user"], s["flower_password"])
    page = requests.get(f"{s['web_url']}/jobs/{job_id}", auth=auth, timeout=30)
    assert page.status_code == 200
    assert f'src="/jobs/{job_id}/still.png"' in page.text and "<video" not in page.text
    image = requests.get(f"{s['web_url']}/jobs/{job_id}/still.png", auth=auth, timeout=30)
    assert image.headers["Content-Type"] == "image/png"
    assert image.content == still.read_bytes()

    # AND `farm retry --frames` names the still's frame, not a tile: another is refused by name
    refused = local_farm.farm("retry", job_id, "--frames", "2")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "renders one still, frame 9, in 4 tiles; `--frames 9` renders all" in refused.stderr
    # WHEN its frame is fixed
    fixed = local_farm.farm("retry", job_id, "--frames", "9", check=True).stdout
    assert f"fixing {job_id} frames 9 (all 4 tiles)" in fixed, fixed
    assert "the merge makes the still again; the still so far is kept as version 1" in fixed
    assert wait_final(local_farm, job_id, 300)["state"] == "done"
    # AND `farm status` says the still's frame was fixed, not tile slots 0-3
    shown = local_farm.farm("status", job_id, check=True).stdout
    assert "fixed   frames 9 (all 4 tiles) at " in shown and "frames 0-3" not in shown, shown
    # THEN every tile rendered again, and the still before it is version 1, a PNG with its passes
    assert local_farm.ledger().render_counts(job_id) == dict.fromkeys(range(4), 2)
    store = local_farm.store()
    assert store.head(f"jobs/{job_id}/output.v1.png") is not None
    assert keys.output_version_key(job_id, 1, "png") == f"jobs/{job_id}/output.v1.png"
    kept = local_farm.farm("fetch", job_id, f"{tmp_path}/v1/", "--version", "1", check=True)
    old_still, old_passes = (Path(line) for line in kept.stdout.split()[-2:])
    assert old_still == tmp_path / "v1" / f"{job_id}.v1.png"
    assert old_still.read_bytes() == still.read_bytes()
    assert old_passes.name == f"{job_id}.v1.passes.exr"
    assert old_passes.read_bytes() == passes.read_bytes()
    assert store.head(f"jobs/{job_id}/output.passes.exr") is not None


def test_a_denoised_tiled_still_is_denoised_once_with_no_seam(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a 128x96 scene with Cycles denoising on (OIDN), its frame 9 rendered whole, denoised
    # (tiles each denoised alone differ from it by 3.1/255 on an edge row: 2.6 over the rest)
    scene = build_scene(tmp_path, samples=4, denoise=True)
    whole = pixels(render_whole(scene, tmp_path), tmp_path)

    # WHEN it is submitted as a still in 4 tiles
    done = local_farm.farm("submit", str(scene), "--frames", "9", "--tiles", "4", "--wait",
                           "--json", timeout=600)  # fmt: skip
    # THEN it is done, and its still is the frame's size
    assert done.returncode == 0, done.stdout + done.stderr + local_farm.logs()
    job_id = json.loads(done.stdout)["id"]
    fetched = local_farm.farm("fetch", job_id, f"{tmp_path}/out/", check=True).stdout.strip()
    still, passes = (Path(line) for line in fetched.split()[-2:])
    merged = pixels(still, tmp_path)
    assert merged.shape == whole.shape == (HEIGHT, WIDTH, 4)
    # AND its passes: the denoiser's, and the noise before the denoiser as Blender names it
    layers = read_exr(str(passes))[1]
    for name in ("Noisy Image.R", "Denoising Normal.X", "Denoising Albedo.R"):
        assert layers[f"ViewLayer.{name}"].shape == (HEIGHT, WIDTH), sorted(layers)
    assert not any(".Combined." in name for name in layers)
    # AND `--frames` gives each tile's passes (multilayer EXR, a full frame each)
    local_farm.farm("fetch", job_id, f"{tmp_path}/passes/", "--frames", check=True)
    tiles = sorted(p for p in (tmp_path / "passes" / f"{job_id}-frames").rglob("*.exr"))
    assert len(tiles) == 4 and all(p.read_bytes()[:4] == b"\x76\x2f\x31\x01" for p in tiles)
    diff = numpy.abs(merged - whole)[..., :3]
    assert float(diff.mean()) < 1 / 255  # OIDN on the merged passes: as on the whole frame
    # AND no seam: the rows and columns either side of each tile edge differ from the whole
    # render no more than the rest of the image does (a tile denoised alone would differ there)
    rects = tile_rects(4, WIDTH, HEIGHT)
    rows = {r.y0 for r in rects if r.y0} | {r.y0 - 1 for r in rects if r.y0}
    cols = {r.x0 for r in rects if r.x0} | {r.x0 - 1 for r in rects if r.x0}
    inner_rows = [y for y in range(HEIGHT) if all(abs(y - e) > 3 for e in rows)]
    inner_cols = [x for x in range(WIDTH) if all(abs(x - e) > 3 for e in cols)]
    interior = float(diff[inner_rows][:, inner_cols].mean())
    assert interior < 2 / 255, interior
    for row in rows:
        assert float(diff[row].mean()) - interior < 2 / 255, f"seam at row {row}"
    for col in cols:
        assert float(diff[:, col].mean()) - interior < 2 / 255, f"seam at column {col}"


def test_what_cannot_be_tiled_is_refused_by_name(local_farm: LocalFarm, tmp_path: Path) -> None:
    # GIVEN a scene
    plain = build_scene(tmp_path, samples=1, denoise=False)
    cases = [
        (["--frames", "1-20", "--tiles", "4"], "--tiles renders one still"),
        (["--frames", "9", "--tiles", "4", "--chunk-size", "2"], "--chunk-size with"),
    ]
    for args, words in cases:
        # WHEN each is submitted with --tiles
        refused = local_farm.farm("submit", str(plain), *args)
        # THEN it is refused at submit (exit 2), saying why
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert words in refused.stderr, (args, refused.stderr)
