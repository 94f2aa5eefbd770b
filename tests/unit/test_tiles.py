"""farm.core.tiles: the tiles cover the frame once, and the border fractions land on their
pixels as Blender computes them (float32, truncated)."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy
import pytest

from farm.blender import command as blender
from farm.blender.tilemerge import MergeFailed, merge_passes, read_exr, write_exr
from farm.core.errors import SpecError
from farm.core.sources import SceneInfo
from farm.core.spec import FrameRange, JobKind, JobSpec, build_render_spec, provenance
from farm.core.tiles import (
    auto_tiles,
    border_of,
    check_tiled,
    denoised,
    fix_slots,
    grid,
    merge_plan,
    passes_key,
    pixels_of,
    still_format,
    tile_job,
    tile_rects,
    tiled,
)


@pytest.mark.parametrize("tiles", [1, 2, 3, 4, 6, 7, 8, 9, 12, 16, 64])
@pytest.mark.parametrize("size", [(128, 96), (1920, 1080), (3840, 2160), (7680, 4320), (999, 37)])
def test_tiles_cover_every_pixel_once(tiles: int, size: tuple[int, int]) -> None:
    width, height = size
    covered = [[0] * width for _ in range(height)] if width * height < 200_000 else None
    rects = tile_rects(tiles, width, height)
    assert len(rects) == tiles
    assert sum(r.width * r.height for r in rects) == width * height
    assert all(r.width > 0 and r.height > 0 for r in rects)
    if covered is not None:
        for r in rects:
            for y in range(r.y0, r.y1):
                for x in range(r.x0, r.x1):
                    covered[y][x] += 1
        assert all(c == 1 for row in covered for c in row)


def test_borders_land_on_their_pixels_at_every_width() -> None:
    # Exact fractions (px / size) miss by one pixel in float32 at some sizes; the nudged ones never.
    for width in range(16, 7681, 13):
        height = max(16, width * 9 // 16)
        for rect in tile_rects(8, width, height):
            assert pixels_of(border_of(rect, width, height), width, height) == (
                rect.x0, rect.y0, rect.x1, rect.y1,
            ), (width, height, rect)  # fmt: skip


def test_neighbours_share_each_edge() -> None:
    rects = tile_rects(4, 128, 96)
    left, right = border_of(rects[0], 128, 96), border_of(rects[1], 128, 96)
    assert left.max_x == right.min_x
    assert (left.min_x, left.max_y) == (0.0, 1.0)


def test_grid_is_nearest_square_tiles() -> None:
    assert grid(8, 3840, 2160) == (4, 2)
    assert grid(4, 128, 96) == (2, 2)
    assert grid(7, 3840, 2160) == (7, 1)


def test_auto_tiles_by_pixels_and_samples_capped_by_workers() -> None:
    assert auto_tiles(3840, 2160, 128, workers=10) == 6  # 8.3 MP at 128 samples: 1.5 MP tiles
    assert auto_tiles(3840, 2160, 1024, workers=10) == 20  # capped: twice the workers
    assert auto_tiles(3840, 2160, 1024, workers=100) == 45
    assert auto_tiles(640, 360, 16, workers=4) == 2  # never fewer than 2
    assert auto_tiles(7680, 4320, 4096, workers=1000) == 64


def test_merge_plan_names_each_tile_and_rect() -> None:
    rects = tile_rects(2, 10, 4)
    plan = merge_plan(out="o.png", width=10, height=4, tiles=[("a", rects[0]), ("b", rects[1])],
                      file_format={"file_format": "PNG"})  # fmt: skip
    assert plan["tiles"] == [
        {"path": "a", "rect": [0, 0, 5, 4]},
        {"path": "b", "rect": [5, 0, 10, 4]},
    ]


def test_merge_argv_runs_the_merge_script_like_the_render_script() -> None:
    plan = Path("/w/merge.json")
    assert blender.merge_argv(blender=blender.WHEEL, plan_path=plan, python="/py") == [
        "/py", "-I", str(blender.MERGE_SCRIPT), "--plan", "/w/merge.json",
    ]  # fmt: skip
    assert blender.merge_argv(blender="/opt/blender", plan_path=plan)[:4] == [
        "/opt/blender", "--background", "--factory-startup", "--disable-autoexec",
    ]  # fmt: skip


VIEW = {"view_transform": "AgX", "look": "None", "exposure": 0.0, "gamma": 1.0,
        "display_device": "sRGB", "curves": False}  # fmt: skip


def _still(**changes: object) -> JobSpec:
    scene = SceneInfo(
        scene="Scene", blender_version="4.5", frame_start=9, frame_end=9, frame_step=1, fps=24,
        fps_base=1.0, resolution_x=1920, resolution_y=1080, resolution_percentage=100,
        camera="Cam", engine="CYCLES", samples=128, denoising=False, view_layers=("ViewLayer",),
        file_format="PNG", color_depth="16", color_mode="RGBA", cameras=("Cam",),
    )  # fmt: skip
    spec = build_render_spec(source_name="still.blend", frames="9", chunk_size="1",
                             resolution=None, fps=None, samples=None, codec="h264",
                             scene=replace(scene, **changes))  # type: ignore[arg-type]  # fmt: skip
    return spec


def test_a_tiled_still_is_its_tile_slots_one_chunk_each_and_keeps_its_frame() -> None:
    still = tiled(_still(), 4)
    assert (still.tiles, still.tile_frame, str(still.frames), still.chunk_size) == (4, 9, "0-3", 1)
    assert JobSpec.from_json(still.to_json()) == still
    assert provenance(still)["frames"]["value"] == "9"
    job = tile_job(still)
    assert job["frame"] == 9
    assert job["borders"] == [list(border_of(r, 1920, 1080).corners)
                              for r in tile_rects(4, 1920, 1080)]  # fmt: skip
    assert still_format(still) == (
        ".png",
        {"file_format": "PNG", "color_mode": "RGBA", "color_depth": "16"},
    )


def test_retry_frames_of_a_tiled_still_is_its_frame_rendering_every_tile() -> None:
    # GIVEN a still of frame 9 in 4 tiles (slots 0-3)
    still = tiled(_still(), 4)
    # WHEN its frame is fixed, THEN every tile renders again
    assert fix_slots(still, "9") == (0, 1, 2, 3)
    assert fix_slots(still, " 9-9 ") == (0, 1, 2, 3)


@pytest.mark.parametrize("frames", ["2", "0-3", "8-10", "9,10", "x"])
def test_retry_frames_of_a_tiled_still_other_than_its_frame_is_refused(frames: str) -> None:
    # GIVEN a still of frame 9 in 4 tiles; WHEN other frames (a tile slot among them) are fixed
    with pytest.raises(SpecError) as refused:
        fix_slots(tiled(_still(), 4), frames)
    # THEN it is refused, naming the still's frame and what to do
    assert "renders one still, frame 9, in 4 tiles; `--frames 9` renders all" in str(refused.value)


def test_a_denoised_still_renders_passes_and_is_denoised_once_through_the_scenes_view() -> None:
    still = tiled(_still(denoising=True, view=VIEW), 4)
    assert denoised(still) and tile_job(still)["denoise"] is True
    assert not tile_job(tiled(_still(), 4))["denoise"]
    assert not denoised(replace(still, engine="BLENDER_EEVEE_NEXT"))  # no Cycles, no denoiser
    plan = merge_plan(out="o.png", width=4, height=2, tiles=[], file_format={}, view=VIEW)
    assert plan["denoise"] == {"view": VIEW}
    assert "denoise" not in merge_plan(out="o.png", width=4, height=2, tiles=[], file_format={})


def test_an_old_spec_loads_untiled() -> None:
    data = _still().to_json()
    del data["tiles"], data["tile_frame"]
    assert JobSpec.from_json(data).tiles == 0


def test_tiles_auto_sizes_from_the_frame_samples_and_workers() -> None:
    assert tiled(_still(), None, workers=8).tiles == auto_tiles(1920, 1080, 128, 8) == 2
    assert tiled(_still(resolution_x=7680, resolution_y=4320), None, workers=8).tiles == 16


@pytest.mark.parametrize(
    ("changes", "count", "words"),
    [
        ({"frame_end": 20}, 4, "--tiles renders one still, and --frames is 9-20"),
        ({}, 1, "--tiles 1: choose 2 to 64 tiles"),
        ({}, 65, "--tiles 65: choose 2 to 64 tiles"),
        ({"resolution_x": 64, "resolution_y": 36}, 16, "tiles under 16 pixels a side"),
        ({"denoising": True}, 4, "submitted before the farm read its colour management"),
        ({"denoising": True, "view": {**VIEW, "curves": True}}, 4, "uses View > Curves"),
        ({"file_format": "OPEN_EXR_MULTILAYER"}, 4, "multilayer EXR"),
    ],
)
def test_what_cannot_be_tiled_is_refused_by_name(
    changes: dict[str, object], count: int, words: str
) -> None:
    spec = _still(**changes)
    if "frame_end" in changes:
        spec = replace(spec, frames=FrameRange(first=9, last=20))
    with pytest.raises(SpecError) as refused:
        tiled(spec, count)
    assert words in str(refused.value)


def test_animation_options_and_transcodes_are_refused_with_tiles() -> None:
    for changes, words in (({"preview": 2}, "--preview is for animations"),
                           ({"check_frames": True}, "--check-frames is for animations"),
                           ({"kind": JobKind.TRANSCODE}, "--tiles splits a rendered still")):  # fmt: skip
        with pytest.raises(SpecError, match=words):
            tiled(replace(_still(), **changes), 4)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="frames must be the tile slots 0-3"):
        check_tiled(replace(tiled(_still(), 4), frames=FrameRange(first=0, last=4)))


def _layers(height: int, width: int, seed: int) -> dict[str, numpy.ndarray]:
    rng = numpy.random.default_rng(seed)
    return {
        "ViewLayer.Combined.R": rng.random((height, width), dtype=numpy.float32),
        "ViewLayer.Depth.Z": rng.random((height, width), dtype=numpy.float32) * 1e10,
        "ViewLayer.Normal.X": rng.random((height, width)).astype(numpy.float16),
    }


def test_an_exr_written_is_read_back_as_written(tmp_path: Path) -> None:
    # GIVEN passes of 37 rows (two full ZIP chunks of 16 and one of 5), float and half
    layers = _layers(37, 23, seed=1)
    blender_tag = {b"BlenderMultiChannel": (b"string", b"Blender V2.55.1 and newer")}
    # WHEN they are written as an EXR and read back
    write_exr(str(tmp_path / "p.exr"), layers, blender_tag)
    header, read = read_exr(str(tmp_path / "p.exr"))
    # THEN every channel is as it was, bit for bit, and the multilayer tag is kept
    assert set(read) == set(layers)
    for name, plane in layers.items():
        assert read[name].dtype == plane.dtype and numpy.array_equal(read[name], plane), name
    assert header[b"BlenderMultiChannel"] == blender_tag[b"BlenderMultiChannel"]
    assert header[b"compression"] == (b"compression", b"\x03")  # ZIP


def test_an_exr_written_is_what_ffmpeg_decodes(tmp_path: Path) -> None:
    # GIVEN a Combined layer (RGBA float) written by the merge's EXR writer
    rng = numpy.random.default_rng(3)
    rgba = {f"ViewLayer.Combined.{c}": rng.random((21, 34), dtype=numpy.float32) for c in "RGBA"}
    write_exr(str(tmp_path / "c.exr"), rgba, {})
    # WHEN ffmpeg's own EXR decoder reads that layer
    argv = ["ffmpeg", "-v", "error", "-layer", "ViewLayer.Combined", "-i", str(tmp_path / "c.exr"),
            "-f", "rawvideo", "-pix_fmt", "gbrapf32le", "-"]  # fmt: skip
    raw = subprocess.run(argv, check=True, capture_output=True, timeout=60).stdout
    # THEN it sees the very values (planes G, B, R, A)
    planes = numpy.frombuffer(raw, dtype="<f4").reshape(4, 21, 34)
    for plane, channel in zip(planes, "GBRA", strict=True):
        assert numpy.array_equal(plane, rgba[f"ViewLayer.Combined.{channel}"]), channel


def _tiles(tmp: Path, count: int, width: int, height: int, *, full: bool) -> tuple[list, dict]:
    whole = _layers(height, width, seed=2)
    tiles = []
    for rect in tile_rects(count, width, height):
        cut = (slice(rect.y0, rect.y1), slice(rect.x0, rect.x1))
        if full:  # a full frame, black outside the tile's region (a denoised still's tile)
            planes = {n: numpy.zeros_like(p) for n, p in whole.items()}
            for n, p in planes.items():
                p[cut] = whole[n][cut]
        else:
            planes = {n: numpy.ascontiguousarray(p[cut]) for n, p in whole.items()}
        path = tmp / f"tile{rect.index}.exr"
        write_exr(str(path), planes, {})
        tiles.append({"path": str(path), "passes": str(path), "rect": rect.to_json()})
    return tiles, whole


@pytest.mark.parametrize("full", [False, True])
def test_tiles_passes_merge_to_the_whole_frames(tmp_path: Path, full: bool) -> None:
    # GIVEN the passes of 6 tiles of a 70x45 frame, cropped to their regions or full frames
    tiles, whole = _tiles(tmp_path, 6, 70, 45, full=full)
    plan = {"width": 70, "height": 45, "tiles": tiles, "passes_out": str(tmp_path / "m.exr")}
    if full:
        plan["denoise"] = {"view": {}}
    # WHEN they are merged
    merge_passes(plan)
    # THEN each pass is the whole frame's; a denoised still's Combined is named Noisy Image
    merged = read_exr(str(tmp_path / "m.exr"))[1]
    for name, plane in whole.items():
        shown = name.replace(".Combined.", ".Noisy Image.") if full else name
        assert numpy.array_equal(merged[shown], plane), shown
    assert len(merged) == len(whole)


def test_tiles_with_other_passes_or_sizes_fail_the_merge_by_name(tmp_path: Path) -> None:
    # GIVEN 4 tiles' passes, one lacking the Depth pass, then one of the wrong size
    tiles, _ = _tiles(tmp_path, 4, 64, 32, full=False)
    header, planes = read_exr(tiles[2]["passes"])
    write_exr(tiles[2]["passes"], {n: p for n, p in planes.items() if "Depth" not in n}, header)
    plan = {"width": 64, "height": 32, "tiles": tiles, "passes_out": str(tmp_path / "m.exr")}
    # WHEN they are merged, THEN the merge fails naming the tile and the pass
    with pytest.raises(MergeFailed, match=r"tile2\.exr has other passes .*Depth"):
        merge_passes(plan)
    write_exr(tiles[2]["passes"], {n: p[:, :-1].copy() for n, p in planes.items()}, header)
    with pytest.raises(MergeFailed, match=r"tile2\.exr's passes are 15x32, its region 16x32"):
        merge_passes(plan)


def test_a_stills_passes_sit_beside_its_image_and_its_versions() -> None:
    assert passes_key("jobs/j1/output.png") == "jobs/j1/output.passes.exr"
    assert passes_key("jobs/j1/output.v2.exr") == "jobs/j1/output.v2.passes.exr"


def test_the_api_takes_a_scenes_view_settings_as_plain_values_only() -> None:
    """A spec through the API carries the scene's view (the denoised merge's colour management):
    read back as the CLI wrote it; a nested or oversized value is refused by name."""
    from farm.web.api.answers import ApiError
    from farm.web.api.validate import job_spec

    spec = tiled(_still(view=VIEW), 4)
    assert job_spec(spec.to_json(), max_chunks=100) == spec
    assert job_spec(tiled(_still(view=None), 4).to_json(), max_chunks=100).scene.view is None  # type: ignore[union-attr]
    for view, said in (
        ({**VIEW, "look": {"nested": 1}}, "spec.scene.view.look must be a string"),
        ({"x" * 65: 1}, "spec.scene.view has a name that is not 1 to 64 characters"),
        ({f"k{n}": n for n in range(65)}, "spec.scene.view must be an object of at most 64"),
        ("AgX", "spec.scene.view must be an object"),
    ):
        data = spec.to_json()
        data["scene"]["view"] = view
        with pytest.raises(ApiError) as refused:
            job_spec(data, max_chunks=100)
        assert said in str(refused.value)
