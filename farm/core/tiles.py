"""A still split into render regions (pure): integer pixel rectangles first, then the border
fractions Blender is given, chosen so its rounding lands on those very pixels, and `--tiles auto`.

Blender turns a border into pixels as `int(fraction * size)` (it truncates): a fraction of
exactly `px / size` may come out as `px - 1` in float32. Each inner edge is therefore given a
quarter pixel past its line, which truncation and rounding both take to `px`; the image's own
edges are 0 and 1 exactly. Neighbouring tiles share each edge's one number, so no pixel is
rendered twice or missed.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

MAX_TILES = 64
TILE_PIXELS = 1_500_000
"""`--tiles auto` aims for tiles of about 1.5 megapixels at 128 samples..."""
TILE_SAMPLES = 128
"""...and proportionally smaller tiles at more samples (the work per tile stays about the same)."""
_EDGE_NUDGE = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class Rect:
    """A tile's pixels: columns x0..x1-1, rows y0..y1-1 counted from the image's top row."""

    index: int
    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0

    def to_json(self) -> list[int]:
        return [self.x0, self.y0, self.x1, self.y1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Border:
    """What Blender's border render is given: fractions of the frame, y from the bottom."""

    min_x: float
    min_y: float
    max_x: float
    max_y: float

    @property
    def corners(self) -> tuple[float, float, float, float]:
        """min x, min y, max x, max y: RenderSettings.border."""
        return self.min_x, self.min_y, self.max_x, self.max_y


def grid(tiles: int, width: int, height: int) -> tuple[int, int]:
    """Columns and rows for `tiles` regions of a width x height frame: the factor pair whose
    tiles are closest to square (8 tiles of a 16:9 frame: 4 x 2)."""
    best = (tiles, 1)
    best_score = math.inf
    for rows in range(1, tiles + 1):
        if tiles % rows:
            continue
        cols = tiles // rows
        if cols > width or rows > height:
            continue
        score = abs(math.log((width / cols) / (height / rows)))
        if score < best_score:
            best, best_score = (cols, rows), score
    return best


def _cuts(size: int, parts: int) -> list[int]:
    return [size * i // parts for i in range(parts + 1)]


def tile_rects(tiles: int, width: int, height: int) -> list[Rect]:
    """The tiles' pixel rectangles, row by row from the top; together they cover every pixel
    of the frame once."""
    cols, rows = grid(tiles, width, height)
    xs, ys = _cuts(width, cols), _cuts(height, rows)
    return [
        Rect(index=r * cols + c, x0=xs[c], y0=ys[r], x1=xs[c + 1], y1=ys[r + 1])
        for r in range(rows)
        for c in range(cols)
    ]


def _edge(px: int, size: int) -> float:
    if px <= 0:
        return 0.0
    if px >= size:
        return 1.0
    return (px + _EDGE_NUDGE) / size


def border_of(rect: Rect, width: int, height: int) -> Border:
    """The border fractions that make Blender render exactly `rect` (y flipped: Blender counts
    rows from the bottom)."""
    return Border(
        min_x=_edge(rect.x0, width),
        max_x=_edge(rect.x1, width),
        min_y=_edge(height - rect.y1, height),
        max_y=_edge(height - rect.y0, height),
    )


def pixels_of(border: Border, width: int, height: int) -> tuple[int, int, int, int]:
    """What Blender makes of a border (truncation, as its render init does): x0, y0, x1, y1 with
    rows from the top, for the tests that prove `border_of` lands on its rect."""
    x0, x1 = _blender_px(border.min_x, width), _blender_px(border.max_x, width)
    b0, b1 = _blender_px(border.min_y, height), _blender_px(border.max_y, height)
    return x0, height - b1, x1, height - b0


def _f32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _blender_px(fraction: float, size: int) -> int:
    """`(int)(border * size)` as Blender computes it: in float32 (the border is stored so)."""
    return int(_f32(_f32(fraction) * size))


def auto_tiles(width: int, height: int, samples: int, workers: int) -> int:
    """`--tiles auto`: tiles of about TILE_PIXELS at TILE_SAMPLES samples (smaller at more
    samples), at least 2, at most twice the live render workers (and MAX_TILES)."""
    work = width * height * max(samples, 1) / TILE_SAMPLES
    wanted = max(2, math.ceil(work / TILE_PIXELS))
    cap = max(2, min(MAX_TILES, 2 * max(workers, 1)))
    return min(wanted, cap)


def merge_plan(
    *,
    out: str,
    width: int,
    height: int,
    tiles: list[tuple[str, Rect]],
    file_format: dict[str, str],
) -> dict[str, object]:
    """The plan farm/blender/tilemerge.py reads: each tile's file and rect, the frame's size,
    the file settings the merged image is written with (the scene's own)."""
    return {
        "out": out,
        "width": width,
        "height": height,
        "format": dict(file_format),
        "tiles": [{"path": path, "rect": rect.to_json()} for path, rect in tiles],
    }
