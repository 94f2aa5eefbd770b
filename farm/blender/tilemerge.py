"""Merge a still's tiles into one image, inside Blender (the bpy wheel or a blender binary), as
renders run: a child process in the worker's box that imports nothing from the farm.

    python -I tilemerge.py --plan plan.json
    blender -b --factory-startup --python-exit-code 3 --python tilemerge.py -- --plan plan.json

The plan (farm.core.tiles.merge_plan): {"out": path, "width": W, "height": H, "format": {...},
"tiles": [{"path": p, "rect": [x0, y0, x1, y1]}]}, rects in pixels with rows from the top.
Pixels are copied as they are stored (every image read and written as non-colour data), so the
merged file holds each tile's very values: no view transform runs twice. With "passes_out" (and
each tile's "passes" file), the still's passes are merged too, into one multilayer EXR.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
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


PASSES = ("Combined", "Alpha", "Denoising Normal", "Denoising Albedo")
"""A denoised still's passes, summed over its tiles (each black outside its region)."""


EXR_MAGIC = b"\x76\x2f\x31\x01"
_EXR_LINES = {0: 1, 2: 1, 3: 16}
"""Scanlines per chunk of the compressions the merge reads and writes: NONE, ZIPS, ZIP (what
the render script saves a tile's passes in)."""
_EXR_TYPES = {0: "<u4", 1: "<f2", 2: "<f4"}
_EXR_NO_FLAGS = 0x200 | 0x800 | 0x1000  # tiled, deep, multi-part: not what Blender saves here


def exr_header(path: str, data: bytes) -> tuple[dict[bytes, tuple[bytes, bytes]], int]:
    """An OpenEXR file's header attributes (name: (type, value)) and where the header ends."""
    if data[:4] != EXR_MAGIC:
        raise MergeFailed(f"tile {path} is not an OpenEXR file")
    header: dict[bytes, tuple[bytes, bytes]] = {}
    at = 8
    try:
        while data[at] != 0:
            name_end = data.index(b"\0", at)
            kind_end = data.index(b"\0", name_end + 1)
            (length,) = struct.unpack_from("<i", data, kind_end + 1)
            value = data[kind_end + 5 : kind_end + 5 + length]
            header[data[at:name_end]] = (data[name_end + 1 : kind_end], value)
            at = kind_end + 5 + length
    except (IndexError, ValueError, struct.error) as exc:
        raise MergeFailed(f"tile {path} has a broken OpenEXR header") from exc
    return header, at + 1


def exr_size(path: str) -> tuple[int, int]:
    """Width and height from an OpenEXR file's header (its dataWindow): bpy shows a multilayer
    EXR's size as 0x0 (its passes are picked per use)."""
    with open(path, "rb") as fh:
        data = fh.read(1 << 20)
    x0, y0, x1, y1 = _window(path, exr_header(path, data)[0])
    return x1 - x0 + 1, y1 - y0 + 1


def _window(path: str, header: dict[bytes, tuple[bytes, bytes]]) -> tuple[int, int, int, int]:
    if b"dataWindow" not in header:
        raise MergeFailed(f"tile {path} has no dataWindow in its header")
    x0, y0, x1, y1 = struct.unpack("<4i", header[b"dataWindow"][1])
    return x0, y0, x1, y1


# bpy reads one pass of a multilayer EXR at a time and cannot write one from arrays, and the
# worker image's Blender has no OpenEXR or OpenImageIO module: so the merge reads and writes
# the scanline files Blender saves (NONE, ZIPS or ZIP compressed) itself, with numpy and zlib.
def read_exr(path: str) -> tuple[dict[bytes, tuple[bytes, bytes]], dict[str, Any]]:
    """A scanline OpenEXR file's header and its channels (name: rows x columns array, top row
    first); MergeFailed naming what it cannot read."""
    import numpy

    with open(path, "rb") as fh:
        data = fh.read()
    header, at = exr_header(path, data)
    (version,) = struct.unpack_from("<I", data, 4)
    compression = header.get(b"compression", (b"", b"\xff"))[1][0]
    if version & _EXR_NO_FLAGS or compression not in _EXR_LINES:
        raise MergeFailed(
            f"tile {path}: a tiled, deep, multi-part or not ZIP/NONE-compressed EXR, which the "
            "merge does not read (the render script saves a tile's passes as ZIP scanlines)"
        )
    x0, y0, x1, y1 = _window(path, header)
    width, height = x1 - x0 + 1, y1 - y0 + 1
    channels = _channels(path, header)
    planes = {name: numpy.empty((height, width), dtype=kind) for name, kind in channels}
    row_bytes = width * sum(numpy.dtype(kind).itemsize for _, kind in channels)
    lines = _EXR_LINES[compression]
    count = -(-height // lines)
    offsets = struct.unpack_from(f"<{count}Q", data, at)
    for offset in offsets:
        y, size = struct.unpack_from("<ii", data, offset)
        rows = min(lines, y1 + 1 - y)
        raw = data[offset + 8 : offset + 8 + size]
        if size < rows * row_bytes:
            raw = _unzip(raw)
        block = numpy.frombuffer(raw, dtype=numpy.uint8).reshape(rows, row_bytes)
        col = 0
        for name, kind in channels:
            step = width * numpy.dtype(kind).itemsize
            planes[name][y - y0 : y - y0 + rows] = block[:, col : col + step].copy().view(kind)
            col += step
    return header, planes


def _channels(path: str, header: dict[bytes, tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    raw = header.get(b"channels", (b"", b""))[1]
    found, at = [], 0
    while at < len(raw) and raw[at] != 0:
        end = raw.index(b"\0", at)
        kind, _linear, xs, ys = struct.unpack_from("<iB3xii", raw, end + 1)
        if kind not in _EXR_TYPES or (xs, ys) != (1, 1):
            raise MergeFailed(f"tile {path}: channel {raw[at:end]!r} is subsampled or unknown")
        found.append((raw[at:end].decode("utf-8"), _EXR_TYPES[kind]))
        at = end + 17
    return found


def _unzip(raw: bytes) -> bytes:
    """OpenEXR's ZIP chunk undone: inflate, undo the byte predictor, interleave the halves."""
    import numpy

    delta = numpy.frombuffer(zlib.decompress(raw), dtype=numpy.uint8).astype(numpy.int64)
    delta[1:] -= 128
    joined = (numpy.cumsum(delta) & 255).astype(numpy.uint8)
    out = numpy.empty_like(joined)
    half = (len(joined) + 1) // 2
    out[0::2], out[1::2] = joined[:half], joined[half:]
    return bytes(out.tobytes())


def _zip(raw: bytes) -> bytes:
    """OpenEXR's ZIP chunk: the bytes' halves split, a byte predictor, deflated."""
    import numpy

    src = numpy.frombuffer(raw, dtype=numpy.uint8)
    split = numpy.concatenate([src[0::2], src[1::2]]).astype(numpy.int16)
    split[1:] = (split[1:] - split[:-1] + 128) & 255
    return zlib.compress(split.astype(numpy.uint8).tobytes(), 6)


def write_exr(
    path: str, planes: dict[str, Any], attributes: dict[bytes, tuple[bytes, bytes]]
) -> None:
    """`planes` (name: rows x columns, top row first, all one size) as a ZIP-compressed scanline
    OpenEXR file; `attributes`: other header attributes kept (a multilayer file's
    BlenderMultiChannel, which Blender reads its passes by)."""
    import numpy

    names = sorted(planes, key=lambda n: n.encode("utf-8"))  # OpenEXR orders channels so
    height, width = planes[names[0]].shape
    kinds = {n: {v: k for k, v in _EXR_TYPES.items()}[planes[n].dtype.str] for n in names}
    chlist = b"".join(n.encode() + b"\0" + struct.pack("<iB3xii", kinds[n], 0, 1, 1) for n in names)
    window = struct.pack("<4i", 0, 0, width - 1, height - 1)
    own = {
        b"channels": (b"chlist", chlist + b"\0"),
        b"compression": (b"compression", b"\x03"),
        b"dataWindow": (b"box2i", window),
        b"displayWindow": (b"box2i", window),
        b"lineOrder": (b"lineOrder", b"\x00"),
        b"pixelAspectRatio": (b"float", struct.pack("<f", 1.0)),
        b"screenWindowCenter": (b"v2f", struct.pack("<2f", 0.0, 0.0)),
        b"screenWindowWidth": (b"float", struct.pack("<f", 1.0)),
    }
    header = {**{k: v for k, v in attributes.items() if v[0] == b"string"}, **own}
    long_names = any(len(n) > 31 for n in (*header, *(n.encode() for n in names)))
    head = EXR_MAGIC + struct.pack("<I", 2 | (0x400 if long_names else 0))
    head += b"".join(name + b"\0" + kind + b"\0" + struct.pack("<i", len(value)) + value
                     for name, (kind, value) in sorted(header.items())) + b"\0"  # fmt: skip
    chunks = []
    for y in range(0, height, 16):
        rows = [numpy.ascontiguousarray(planes[n][y : y + 16]) for n in names]
        raw = b"".join(b"".join(row[r].tobytes() for row in rows) for r in range(rows[0].shape[0]))
        packed = _zip(raw)
        body = packed if len(packed) < len(raw) else raw
        chunks.append(struct.pack("<ii", y, len(body)) + body)
    at = len(head) + 8 * len(chunks)
    offsets = []
    for chunk in chunks:
        offsets.append(at)
        at += len(chunk)
    with open(path, "wb") as fh:
        fh.write(head + struct.pack(f"<{len(offsets)}Q", *offsets) + b"".join(chunks))


_STILL_ATTRIBUTES = frozenset({b"BlenderMultiChannel", b"Camera", b"File", b"Frame", b"Scene"})


def merge_passes(plan: dict[str, Any]) -> None:
    """The still's passes (every pass its view layers render, as each tile saved them in a
    multilayer EXR) merged by rect into one multilayer EXR at `passes_out`, channel names as
    Blender wrote them. A denoised still's tiles are full frames whose Combined is the noise
    before the merge's denoiser: it is kept as Blender names it then, Noisy Image."""
    import numpy

    width, height = int(plan["width"]), int(plan["height"])
    full = bool(plan.get("denoise"))
    merged: dict[str, Any] = {}
    covered = numpy.zeros((height, width), dtype=numpy.int32)
    attributes: dict[bytes, tuple[bytes, bytes]] = {}
    for tile in plan["tiles"]:
        path = str(tile["passes"])
        x0, y0, x1, y1 = (int(v) for v in tile["rect"])
        header, planes = read_exr(path)
        # What names the still (a tile's own render times would mislead): the first tile's.
        attributes = attributes or {k: v for k, v in header.items() if k in _STILL_ATTRIBUTES}
        shape = (height, width) if full else (y1 - y0, x1 - x0)
        for plane in planes.values():
            if plane.shape != shape:
                raise MergeFailed(
                    f"tile {path}'s passes are {plane.shape[1]}x{plane.shape[0]}, its "
                    f"{'frame' if full else 'region'} {shape[1]}x{shape[0]}"
                )
        if merged and set(planes) != set(merged):
            odd = sorted(set(planes) ^ set(merged))
            raise MergeFailed(f"tile {path} has other passes than the first tile: {odd[:6]}")
        for name, plane in planes.items():
            if name not in merged:
                merged[name] = numpy.zeros((height, width), dtype=plane.dtype)
            merged[name][y0:y1, x0:x1] = plane[y0:y1, x0:x1] if full else plane
        covered[y0:y1, x0:x1] += 1
    if not merged or not (covered == 1).all():
        raise MergeFailed("the tiles' passes do not cover the frame exactly once")
    if full and not any(".Noisy Image." in name for name in merged):
        merged = {name.replace(".Combined.", ".Noisy Image."): p for name, p in merged.items()}
    write_exr(str(plan["passes_out"]), merged, attributes)


def merge_denoised(bpy: Any, plan: dict[str, Any]) -> None:
    """The tiles (full frames of passes, multilayer EXR) summed pass by pass in the compositor,
    denoised once by its Denoise node (OIDN, as Cycles' own denoiser: albedo and normal), and
    written in the scene's format through the scene's view."""
    width, height = int(plan["width"]), int(plan["height"])
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.resolution_x, scene.render.resolution_y = width, height
    scene.render.resolution_percentage = 100
    scene.use_nodes = True
    tree = scene.node_tree
    tree.nodes.clear()
    sums: dict[str, Any] = {}
    for tile in plan["tiles"]:
        path = str(tile["path"])
        tile_w, tile_h = exr_size(path)
        if (tile_w, tile_h) != (width, height):
            raise MergeFailed(f"tile {path} is {tile_w}x{tile_h}, the frame {width}x{height}")
        image = bpy.data.images.load(path, check_existing=False)
        node = tree.nodes.new("CompositorNodeImage")
        node.image = image
        for name in PASSES:
            socket = node.outputs.get(name)
            if socket is None:
                raise MergeFailed(f"tile {path} has no {name} pass")
            if name not in sums:
                sums[name] = socket
                continue
            add = tree.nodes.new("CompositorNodeMixRGB")
            add.blend_type, add.use_clamp = "ADD", False
            add.inputs[0].default_value = 1.0
            tree.links.new(sums[name], add.inputs[1])
            tree.links.new(socket, add.inputs[2])
            sums[name] = add.outputs[0]
    denoise = tree.nodes.new("CompositorNodeDenoise")
    tree.links.new(sums["Combined"], denoise.inputs["Image"])
    tree.links.new(sums["Denoising Normal"], denoise.inputs["Normal"])
    tree.links.new(sums["Denoising Albedo"], denoise.inputs["Albedo"])
    alpha = tree.nodes.new("CompositorNodeSetAlpha")
    alpha.mode = "REPLACE_ALPHA"
    tree.links.new(denoise.outputs[0], alpha.inputs["Image"])
    tree.links.new(sums["Alpha"], alpha.inputs["Alpha"])
    tree.links.new(alpha.outputs[0], tree.nodes.new("CompositorNodeComposite").inputs[0])
    settings(scene, dict(plan.get("format", {})))
    view = dict(plan["denoise"]["view"])
    scene.display_settings.display_device = str(view["display_device"])
    scene.view_settings.view_transform = str(view["view_transform"])
    scene.view_settings.look = str(view["look"])
    scene.view_settings.exposure = float(view["exposure"])
    scene.view_settings.gamma = float(view["gamma"])
    scene.render.use_file_extension = False
    scene.render.filepath = str(plan["out"])
    bpy.ops.render.render(write_still=True, scene=scene.name)


def settings(scene: Any, fmt: dict[str, Any]) -> None:
    """The scene's own file settings on the merge's scene."""
    image = scene.render.image_settings
    image.file_format = fmt.get("file_format", "PNG")
    for name in ("color_mode", "color_depth", "exr_codec", "compression"):
        if name in fmt:
            try:
                setattr(image, name, fmt[name])
            except (TypeError, ValueError) as exc:
                raise MergeFailed(f"cannot write {name}={fmt[name]!r}: {exc}") from exc


def save(bpy: Any, image: Any, out: str, fmt: dict[str, Any]) -> None:
    """Written with the scene's own file settings, through a scene of the merge's own."""
    scene = bpy.data.scenes.new("merge")
    settings(scene, fmt)
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
        if plan.get("denoise"):
            merge_denoised(bpy, plan)
        else:
            merge(bpy, plan)
        if plan.get("passes_out"):
            merge_passes(plan)
    except MergeFailed as exc:
        print(f"FARM-ERROR {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)
    print("FARM-MERGED", flush=True)


if __name__ == "__main__":
    main(sys.argv)
