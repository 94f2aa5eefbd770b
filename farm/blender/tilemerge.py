"""Merge a still's tiles into one image, inside Blender (the bpy wheel or a blender binary), as
renders run: a child process in the worker's box that imports nothing from the farm.

    python -I tilemerge.py --plan plan.json
    blender -b --factory-startup --python-exit-code 3 --python tilemerge.py -- --plan plan.json

The plan (farm.core.tiles.merge_plan): {"out": path, "width": W, "height": H, "format": {...},
"tiles": [{"path": p, "rect": [x0, y0, x1, y1]}]}, rects in pixels with rows from the top.
Pixels are copied as they are stored (every image read and written as non-colour data), so the
merged file holds each tile's very values: no view transform runs twice.
"""

from __future__ import annotations

import json
import sys
from typing import Any

EXIT_FAILED = 3


class MergeFailed(Exception):
    """The tiles cannot make the image; the message says which and why."""


def plan_path(argv: list[str]) -> str:
    args = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
    if len(args) != 2 or args[0] != "--plan":
        raise MergeFailed("usage: tilemerge.py --plan plan.json")
    return args[1]


def load_tile(bpy: Any, path: str, rect: list[int]) -> Any:
    image = bpy.data.images.load(path, check_existing=False)
    if image.type == "MULTILAYER":
        # image.pixels reads one pass of a multilayer EXR: the others would be dropped silently.
        raise MergeFailed(
            f"tile {path} is a multilayer EXR, which the merge does not take yet; save the "
            "still as PNG or a single-layer EXR"
        )
    image.colorspace_settings.is_data = True
    width, height = rect[2] - rect[0], rect[3] - rect[1]
    if tuple(image.size) != (width, height):
        raise MergeFailed(
            f"tile {path} is {image.size[0]}x{image.size[1]}, its region {width}x{height}"
        )
    return image


def merge(bpy: Any, plan: dict[str, Any]) -> None:
    import numpy

    width, height = int(plan["width"]), int(plan["height"])
    canvas = numpy.zeros((height, width, 4), dtype=numpy.float32)
    covered = numpy.zeros((height, width), dtype=numpy.int32)
    is_float = False
    for tile in plan["tiles"]:
        x0, y0, x1, y1 = (int(v) for v in tile["rect"])
        image = load_tile(bpy, str(tile["path"]), [x0, y0, x1, y1])
        is_float = is_float or bool(image.is_float)
        pixels = numpy.empty(len(image.pixels), dtype=numpy.float32)
        image.pixels.foreach_get(pixels)
        channels = image.channels
        block = pixels.reshape((y1 - y0, x1 - x0, channels))[::-1]  # Blender's rows: bottom up
        canvas[y0:y1, x0:x1, :channels] = block
        if channels < 4:
            canvas[y0:y1, x0:x1, 3] = 1.0
        covered[y0:y1, x0:x1] += 1
        bpy.data.images.remove(image)
    if not (covered == 1).all():
        raise MergeFailed("the tiles do not cover the frame exactly once")
    merged = bpy.data.images.new("merged", width, height, alpha=True, float_buffer=is_float)
    merged.colorspace_settings.is_data = True
    merged.pixels.foreach_set(canvas[::-1].ravel())
    save(bpy, merged, str(plan["out"]), dict(plan.get("format", {})))


def save(bpy: Any, image: Any, out: str, fmt: dict[str, Any]) -> None:
    """Written with the scene's own file settings, through a scene of the merge's own."""
    scene = bpy.data.scenes.new("merge")
    settings = scene.render.image_settings
    settings.file_format = fmt.get("file_format", "PNG")
    for name in ("color_mode", "color_depth", "exr_codec", "compression"):
        if name in fmt:
            try:
                setattr(settings, name, fmt[name])
            except (TypeError, ValueError) as exc:
                raise MergeFailed(f"cannot write {name}={fmt[name]!r}: {exc}") from exc
    scene.view_settings.view_transform = "Raw"  # stored values out as they came in
    scene.view_settings.look = "None"
    scene.view_settings.exposure = 0.0
    scene.view_settings.gamma = 1.0
    image.save_render(out, scene=scene)


def main(argv: list[str]) -> None:
    try:
        import bpy

        with open(plan_path(argv), encoding="utf-8") as f:
            plan = json.load(f)
        merge(bpy, plan)
    except MergeFailed as exc:
        print(f"FARM-ERROR {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)
    print("FARM-MERGED", flush=True)


if __name__ == "__main__":
    main(sys.argv)
