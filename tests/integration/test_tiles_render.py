"""A still rendered as tiles by the farm's render script (border render, farm.core.tiles'
fractions), merged by farm/blender/tilemerge.py, compared pixel by pixel with the same frame
rendered whole: the tiles land on their pixels exactly and the merge leaves no seam."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from farm.adapters.settings import Settings
from farm.blender import command as blender
from farm.core.errors import PermanentError
from farm.core.tiles import Rect, border_of, tile_rects
from tests.integration.test_blender_render import render
from workers.host.box import render_box
from workers.phases.tiles import merge_tiles

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
WIDTH, HEIGHT, FRAME = 128, 96, 9
FORMATS = {
    "PNG8": (".png", {"file_format": "PNG", "color_mode": "RGBA", "color_depth": "8"}),
    "PNG16": (".png", {"file_format": "PNG", "color_mode": "RGBA", "color_depth": "16"}),
    "EXR": (".exr", {"file_format": "OPEN_EXR", "color_mode": "RGBA", "color_depth": "32"}),
}


def build_scene(
    tmp: Path, *, samples: int, denoise: bool, fmt: str = "PNG8", passes: bool = False
) -> Path:
    scene = tmp / "still.blend"
    extra = ["passes"] if passes else []  # Depth and Normal too
    argv = [sys.executable, "-I", str(ROOT / "scenes" / "build_still.py"), str(scene), str(WIDTH),
            str(HEIGHT), str(samples), str(int(denoise)), fmt, *extra]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    return scene


def pixels(path: Path, tmp: Path) -> numpy.ndarray:
    out = tmp / f"{path.stem}-{abs(hash(str(path)))}.npy"
    argv = [sys.executable, "-I", str(HERE / "image_pixels.py"), str(path), str(out)]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return numpy.load(out)


def render_whole(scene: Path, tmp: Path, ext: str = ".png") -> Path:
    done = render(scene, tmp / "whole", [FRAME])
    assert done.result.ok, done.result.tail
    return done.out_dir / f"frame_{FRAME:06d}{ext}"


def render_tiles(scene: Path, tmp: Path, count: int, ext: str = ".png") -> list[tuple[Path, Rect]]:
    tiles = []
    for rect in tile_rects(count, WIDTH, HEIGHT):
        border = border_of(rect, WIDTH, HEIGHT)
        settings = blender.RenderSettings(border=border.corners)
        done = render(scene, tmp / f"tile{rect.index}", [FRAME], settings)
        assert done.result.ok, done.result.tail
        tiles.append((done.out_dir / f"frame_{FRAME:06d}{ext}", rect))
    return tiles


def merged_still(scene: Path, tmp: Path, count: int, fmt: str = "PNG8") -> Path:
    ext, file_format = FORMATS[fmt]
    tiles = render_tiles(scene, tmp, count, ext)
    return merge_tiles(
        blender_bin=blender.WHEEL,
        work=tmp,
        out=tmp / f"still{ext}",
        width=WIDTH,
        height=HEIGHT,
        tiles=tiles,
        file_format=file_format,
    )


@pytest.mark.parametrize(("count", "fmt"), [(4, "PNG8"), (6, "PNG16"), (4, "EXR")])
def test_tiles_merge_to_the_untiled_frame(tmp_path: Path, count: int, fmt: str) -> None:
    # GIVEN a scene without denoising, saving PNG (8 or 16 bits) or EXR, rendered whole and in tiles
    scene = build_scene(tmp_path, samples=4, denoise=False, fmt=fmt)
    ext = FORMATS[fmt][0]
    whole = pixels(render_whole(scene, tmp_path, ext), tmp_path)
    # WHEN the tiles are merged
    still = merged_still(scene, tmp_path, count, fmt)
    assert still.suffix == ext
    merged = pixels(still, tmp_path)
    # THEN the still has the frame's size and its pixels
    assert merged.shape == whole.shape == (HEIGHT, WIDTH, 4)
    diff = numpy.abs(merged - whole)
    assert float(diff.mean()) < 1 / 255
    # AND no seam: each row and column on either side of a tile edge is as close as the rest
    rects = tile_rects(count, WIDTH, HEIGHT)
    rows = {r.y0 for r in rects if r.y0} | {r.y0 - 1 for r in rects if r.y0}
    cols = {r.x0 for r in rects if r.x0} | {r.x0 - 1 for r in rects if r.x0}
    assert rows or cols
    for row in rows:
        assert float(diff[row].mean()) < 2 / 255, f"seam at row {row}"
    for col in cols:
        assert float(diff[:, col].mean()) < 2 / 255, f"seam at column {col}"


def test_each_tile_is_its_region(tmp_path: Path) -> None:
    # GIVEN tiles rendered with the border fractions of farm.core.tiles (odd cuts: 3 x 2 tiles)
    scene = build_scene(tmp_path, samples=1, denoise=False)
    # WHEN each is rendered
    tiles = render_tiles(scene, tmp_path, 6)
    # THEN Blender cropped each to exactly its rect's pixels
    for path, rect in tiles:
        assert pixels(path, tmp_path).shape[:2] == (rect.height, rect.width), rect


def test_a_tile_of_the_wrong_size_fails_the_merge_by_name(tmp_path: Path) -> None:
    # GIVEN two tiles of different widths (3 x 2 tiles of 128 px: 42, 43, 43) handed over swapped
    scene = build_scene(tmp_path, samples=1, denoise=False)
    (first, a), (second, b) = render_tiles(scene, tmp_path, 6)[:2]
    # WHEN they are merged
    with pytest.raises(PermanentError) as failed:
        merge_tiles(
            blender_bin=blender.WHEEL,
            work=tmp_path,
            out=tmp_path / "still.png",
            width=WIDTH,
            height=HEIGHT,
            tiles=[(first, b), (second, a)],
            file_format=FORMATS["PNG8"][1],
        )
    # THEN the merge names the tile and its region, and writes nothing
    assert f"tile {first}" in str(failed.value) and "its region 43x48" in str(failed.value)
    assert not (tmp_path / "still.png").exists()


def test_the_merge_runs_in_the_box_and_reads_only_its_folder(tmp_path: Path) -> None:
    # GIVEN 4 tiles rendered outside the merge's folder, and that folder's box (as a still's
    # stitch makes it: workers.phases.tiles.stitch_still)
    scene = build_scene(tmp_path, samples=1, denoise=False)
    outside = render_tiles(scene, tmp_path, 4)
    work = tmp_path / "merge"
    (work / "home").mkdir(parents=True)
    box = render_box(Settings(), workspace=work / "home", out_dir=work, scene=work, tree=False)
    assert box is not None

    def merge(tiles: list[tuple[Path, Rect]]) -> Path:
        return merge_tiles(blender_bin=blender.WHEEL, work=work, out=work / "still.png",
                           width=WIDTH, height=HEIGHT, tiles=tiles,
                           file_format=FORMATS["PNG8"][1], box=box)  # fmt: skip

    # WHEN the boxed merge is given the tiles where they are
    with pytest.raises(PermanentError) as failed:
        merge(outside)
    # THEN it cannot read them (the box shows it its folder alone) and writes nothing
    assert "could not be merged" in str(failed.value)
    assert not (work / "still.png").exists()
    # WHEN the same tiles are in its folder, THEN it merges them
    inside = []
    for path, rect in outside:
        copy = work / f"tile{rect.index}.png"
        shutil.copyfile(path, copy)
        inside.append((copy, rect))
    assert merge(inside).is_file()
