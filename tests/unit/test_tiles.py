"""farm.core.tiles: the tiles cover the frame once, and the border fractions land on their
pixels as Blender computes them (float32, truncated)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.blender import command as blender
from farm.core.tiles import auto_tiles, border_of, grid, merge_plan, pixels_of, tile_rects


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
