"""A still split into render regions (pure): integer pixel rectangles first, then the border
fractions Blender is given, chosen so its rounding lands on those very pixels, and `--tiles auto`.

Blender turns a border into pixels as `int(fraction * size)` (it truncates): a fraction of
exactly `px / size` may come out as `px - 1` in float32. Each inner edge is therefore given a
quarter pixel past its line, which truncation and rounding both take to `px`; the image's own
edges are 0 and 1 exactly. Neighbouring tiles share each edge's one number, so no pixel is
rendered twice or missed.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from farm.core.errors import SpecError
from farm.core.spec import FrameRange, JobKind, JobSpec

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
    view: dict[str, object] | None = None,
    passes_out: str = "",
    passes: list[str] | None = None,
) -> dict[str, object]:
    """The plan farm/blender/tilemerge.py reads: each tile's file and rect, the frame's size,
    the file settings the merged image is written with (the scene's own). `view`: the scene's
    colour management, for a denoised still (its tiles full frames of passes, summed, denoised
    once, written through that view); None: tiles cropped to their rects, copied as stored.
    `passes_out`: where the still's passes are merged to, from each tile's `passes` file (a
    denoised still's: the tiles themselves)."""
    entries: list[dict[str, object]] = [
        {"path": path, "rect": rect.to_json()} for path, rect in tiles
    ]
    if passes_out:
        found = passes if passes is not None else [path for path, _ in tiles]
        for entry, path in zip(entries, found, strict=True):
            entry["passes"] = path
    plan: dict[str, object] = {
        "out": out,
        "width": width,
        "height": height,
        "format": dict(file_format),
        "tiles": entries,
    }
    if passes_out:
        plan["passes_out"] = passes_out
    if view is not None:
        plan["denoise"] = {"view": dict(view)}
    return plan


TILE_PASSES = "tile.passes.exr"
"""Each tile's passes (all its view layers render: 32-bit multilayer EXR), among its File Output
files (keys.file_output_key); a denoised still's tile is such a file itself."""
PASSES_EXT = "passes.exr"
"""The merged still's passes beside it: `jobs/J/output.passes.exr`, fetched as `J.passes.exr`."""


def passes_key(output_key: str) -> str:
    """A still's passes beside its image in the store: `output.png`'s are `output.passes.exr`,
    a kept version's `output.v1.png`'s `output.v1.passes.exr`."""
    return str(PurePosixPath(output_key).with_suffix(f".{PASSES_EXT}"))


def is_tiled(spec: object) -> bool:
    """Whether a job's spec (JSON text or parsed, as the ledger or the API gives it) is a
    tiled still's."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec or "{}")
        except ValueError:
            return False
    return isinstance(spec, dict) and bool(spec.get("tiles"))


MIN_TILE_SIDE = 16
"""A tile narrower or lower than this costs more in Blender's start-up than it renders."""
MOVIE_FORMATS = frozenset({"FFMPEG", "AVI_JPEG", "AVI_RAW"})
"""Formats the render script saves as PNG instead (the farm makes videos); a still too."""


def parse_tiles(text: str) -> int | None:
    """`--tiles N` or `--tiles auto` (None: sized by `auto_tiles` once the scene is read)."""
    value = text.strip().lower()
    if value == "auto":
        return None
    if not value.isdigit():
        raise SpecError(f"--tiles {text!r}: write a number of tiles (2 to {MAX_TILES}) or auto")
    return int(value)


def tiled(spec: JobSpec, count: int | None, *, workers: int = 1) -> JobSpec:
    """`spec` as a still in tiles: its one frame kept as `tile_frame`, its frames the tile slots
    0..N-1 in chunks of one, so claims, leases, retries and blocklists work on tiles unchanged.
    SpecError names what cannot be tiled. `count` None: `--tiles auto` for `workers` render
    workers."""
    if spec.kind is not JobKind.RENDER:
        raise SpecError("--tiles splits a rendered still: submit a .blend (a transcode has none)")
    if spec.frames.count != 1:
        raise SpecError(
            f"--tiles renders one still, and --frames is {spec.frames} ({spec.frames.count} "
            f"frames): name one frame, e.g. --frames {spec.frames.first}"
        )
    if count is None:
        count = auto_tiles(spec.resolution.width, spec.resolution.height, spec.samples, workers)
    if not 2 <= count <= MAX_TILES:
        raise SpecError(f"--tiles {count}: choose 2 to {MAX_TILES} tiles (or auto)")
    still = replace(spec, frames=FrameRange(first=0, last=count - 1), chunk_size=1, tiles=count,
                    tile_frame=spec.frames.first)  # fmt: skip
    check_tiled(still)
    return still


def check_tiled(spec: JobSpec) -> None:
    """A tiled spec (`tiles` set) the farm can run, as the CLI makes one and as the API takes
    one: SpecError naming what is not."""
    count = spec.tiles
    if spec.kind is not JobKind.RENDER:
        raise SpecError("tiles: only a render job renders a still in tiles")
    if not 2 <= count <= MAX_TILES:
        raise SpecError(f"--tiles {count}: choose 2 to {MAX_TILES} tiles (or auto)")
    if spec.frames != FrameRange(first=0, last=count - 1) or spec.chunk_size != 1:
        raise SpecError(f"tiles {count}: frames must be the tile slots 0-{count - 1}, one a chunk")
    for name, given in (("--preview", spec.preview), ("--hold", spec.hold),
                        ("--check-frames", spec.check_frames)):  # fmt: skip
        if given:
            raise SpecError(f"{name} is for animations; a tiled still has one frame: leave it out")
    width, height = spec.resolution.width, spec.resolution.height
    rects = tile_rects(count, width, height)
    if min(min(r.width, r.height) for r in rects) < MIN_TILE_SIDE:
        raise SpecError(
            f"--tiles {count}: a {width}x{height} still would have tiles under "
            f"{MIN_TILE_SIDE} pixels a side; choose fewer tiles"
        )
    scene = spec.scene
    if denoised(spec) and (scene is None or scene.view is None or scene.view.get("curves")):
        # The merge denoises, then writes the image through the scene's view: it must know it.
        why = ("uses View > Curves, which the merge cannot apply" if scene and scene.view
               else "was submitted before the farm read its colour management")  # fmt: skip
        raise SpecError(
            f"--tiles with Cycles denoising on: the scene {why}; turn the curves off (Color "
            "Management > Curves) and submit again, or render the still without --tiles"
        )
    if scene is not None and scene.file_format == "OPEN_EXR_MULTILAYER":
        raise SpecError(
            "--tiles with a multilayer EXR output: the merge cannot carry its passes yet; save "
            "the still as PNG or a single-layer EXR (Output > File Format), or render it "
            "without --tiles"
        )


def fix_slots(spec: JobSpec, frames_arg: str) -> tuple[int, ...]:
    """`farm retry JOB --frames F` of a tiled still: its slots are tiles, not frames, so `F` must
    be the still's own frame, which renders every tile again and merges them again; anything
    else is refused by name (a plain `farm retry JOB` reruns the tiles that failed)."""
    from farm.core.fixes import parse_frame_list

    frame = spec.tile_frame
    try:
        parse_frame_list(frames_arg, FrameRange(first=frame, last=frame))
    except SpecError as exc:
        raise SpecError(
            f"--frames {frames_arg.strip()}: the job renders one still, frame {frame}, in "
            f"{spec.tiles} tiles; `--frames {frame}` renders all its tiles again (a plain "
            "`farm retry` reruns the tiles that failed)"
        ) from exc
    return tuple(range(spec.tiles))


def denoised(spec: JobSpec) -> bool:
    """Whether the still is denoised: the scene's Cycles denoising, once, after the merge (each
    tile renders the denoiser's passes with denoising off: no tile's denoiser sees only its own
    pixels)."""
    scene = spec.scene
    return bool(scene and scene.denoising and (spec.engine or scene.engine) == "CYCLES")


def tile_job(spec: JobSpec) -> dict[str, object]:
    """What the render script is told of a tiled still (its job file's `tiles`): the frame each
    slot renders and each slot's border, the same for every chunk of the job; `denoise`: each
    tile a full frame (black outside its region) in multilayer EXR with the denoiser's passes,
    rendered with denoising off."""
    width, height = spec.resolution.width, spec.resolution.height
    rects = tile_rects(spec.tiles, width, height)
    return {
        "frame": spec.tile_frame,
        "borders": [list(border_of(rect, width, height).corners) for rect in rects],
        "denoise": denoised(spec),
        "passes": TILE_PASSES,
    }


def still_format(spec: JobSpec) -> tuple[str, dict[str, str]]:
    """The merged still's extension and file settings: the scene's own (a movie format saves
    PNG, as the render script saves each tile)."""
    scene = spec.scene
    if scene is None or scene.file_format in MOVIE_FORMATS:
        return ".png", {"file_format": "PNG", "color_mode": "RGB", "color_depth": "8"}
    fmt = {"file_format": scene.file_format, "color_mode": scene.color_mode,
           "color_depth": scene.color_depth}  # fmt: skip
    return EXTENSIONS.get(scene.file_format, ".png"), fmt


EXTENSIONS = {"PNG": ".png", "OPEN_EXR": ".exr", "JPEG": ".jpg", "TIFF": ".tif", "BMP": ".bmp",
              "TARGA": ".tga", "TARGA_RAW": ".tga", "JPEG2000": ".jp2", "WEBP": ".webp",
              "HDR": ".hdr", "CINEON": ".cin", "DPX": ".dpx", "IRIS": ".rgb"}  # fmt: skip
"""Blender's file extension of each still format (RenderSettings.file_extension)."""
