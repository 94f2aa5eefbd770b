"""What a .blend file says about its own render, read without running Blender (pure Python, BAT).

blender-asset-tracer parses the file's DNA; this module picks the scene's render settings out of it
and turns anything unreadable into a SpecError the user can act on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from blender_asset_tracer import blendfile as bat
from blender_asset_tracer.blendfile import iterators

from farm.core.errors import SpecError
from farm.core.sources import SceneInfo

log = logging.getLogger(__name__)

# DNA_scene_types.h: ImageFormatData.imtype, .depth (bit flags) and .planes.
_IMTYPES = {
    0: "TARGA",
    1: "IRIS",
    4: "JPEG",
    14: "TARGA_RAW",
    17: "PNG",
    20: "BMP",
    21: "HDR",
    22: "TIFF",
    23: "OPEN_EXR",
    24: "FFMPEG",
    26: "CINEON",
    27: "DPX",
    28: "OPEN_EXR_MULTILAYER",
    30: "JPEG2000",
    35: "WEBP",
}
_DEPTHS = {1: "1", 2: "8", 4: "10", 8: "12", 16: "16", 32: "24", 64: "32"}
_PLANES = {8: "BW", 24: "RGB", 32: "RGBA"}
_IDP_INT, _IDP_GROUP, _IDP_BOOLEAN = 1, 6, 10
_VIEW_LAYER_RENDER = 1
_OB_CAMERA = 11
_ZSTD, _ZSTD_SEEKABLE = b"\x28\xb5\x2f\xfd", b"\xb1\xea\x92\x8f"


def _version(number: int) -> str:
    """File header versions are three digits in four or more: 304 -> 3.4, 405 -> 4.5, 500 -> 5.0."""
    return f"{number // 100}.{number % 100}"


def _check_complete(bfile: bat.BlendFile, path: Path) -> None:
    """BAT reads a truncated file up to the cut and calls it done; Blender writes ENDB last."""
    with path.open("rb") as fh:
        head = fh.read(4)
        fh.seek(-4, os.SEEK_END)
        if head == _ZSTD and fh.read(4) != _ZSTD_SEEKABLE:
            # Blender ends its zstd files with a seek table: a cut file has lost it.
            raise SpecError(
                f"{path}: the .blend file is truncated (no zstd seek table); save it again"
            )
    size = bfile.block_header_struct.size
    raw = Path(bfile.raw_filepath)
    with raw.open("rb") as fh:
        fh.seek(max(raw.stat().st_size - size, 0), os.SEEK_SET)
        tail = fh.read(size)
    if not tail.startswith(b"ENDB"):
        raise SpecError(f"{path}: the .blend file is truncated (no end block); save it again")


def _id_props(block: bat.BlendFileBlock, group: str) -> dict[str, int]:
    """Integer and boolean ID properties of `group` (e.g. "cycles") on an ID block. Add-on settings
    are IDProperties: in `properties` up to 4.x, in `system_properties` from 5.0 on."""
    found: dict[str, int] = {}
    for field in (b"system_properties", b"properties"):
        try:
            root = block.get_pointer((b"id", field))
        except KeyError:
            continue
        if root is None:
            continue
        first = root.get_pointer((b"data", b"group", b"first"))
        for prop in iterators.listbase(first):
            if prop[b"type"] != _IDP_GROUP or prop.get(b"name", as_str=True) != group:
                continue
            for item in iterators.listbase(prop.get_pointer((b"data", b"group", b"first"))):
                if item[b"type"] in (_IDP_INT, _IDP_BOOLEAN):
                    found.setdefault(item.get(b"name", as_str=True), int(item[(b"data", b"val")]))
    return found


def _samples(scene: bat.BlendFileBlock, engine: str, cycles: dict[str, int]) -> int | None:
    if engine == "CYCLES":
        return cycles.get("samples")
    if engine.startswith("BLENDER_EEVEE"):
        value = scene.get((b"eevee", b"taa_render_samples"), default=None)
        return int(value) if value is not None else None
    return None


def _view_layers(scene: bat.BlendFileBlock) -> tuple[str, ...]:
    names = []
    for layer in iterators.listbase(scene.get_pointer((b"view_layers", b"first"))):
        if layer[b"flag"] & _VIEW_LAYER_RENDER:
            names.append(layer.get(b"name", as_str=True))
    return tuple(names)


def _active_scene(bfile: bat.BlendFile) -> bat.BlendFileBlock:
    """The scene the file opens with: the window's scene in GLOB, else the first scene block."""
    scenes = bfile.find_blocks_from_code(b"SC")
    if not scenes:
        raise SpecError(f"{bfile.filepath}: the .blend file holds no scene to render")
    glob = bfile.find_blocks_from_code(b"GLOB")
    if glob:
        pointer = glob[0].get(b"curscene", default=0)
        current = bfile.block_from_addr.get(pointer) if pointer else None
        if current is not None and current.code == b"SC":
            return current
    first: bat.BlendFileBlock = scenes[0]
    return first


def _info(bfile: bat.BlendFile) -> SceneInfo:
    scene = _active_scene(bfile)
    r = (b"r",)
    engine = scene.get((*r, b"engine"), as_str=True) or "BLENDER_EEVEE"
    cycles = _id_props(scene, "cycles")
    camera = scene.get_pointer(b"camera")
    fmt = (*r, b"im_format")
    imtype, depth, planes = (int(scene[(*fmt, f)]) for f in (b"imtype", b"depth", b"planes"))
    denoising: bool | None = None
    if engine == "CYCLES":
        # Cycles denoises by default; the file stores the flag only once someone changed it.
        denoising = bool(cycles.get("use_denoising", 1))
    return SceneInfo(
        scene=(scene.id_name or b"SC?")[2:].decode("utf-8", "replace"),
        blender_version=_version(bfile.header.version),
        frame_start=int(scene[(*r, b"sfra")]),
        frame_end=int(scene[(*r, b"efra")]),
        frame_step=int(scene[(*r, b"frame_step")]),
        fps=int(scene[(*r, b"frs_sec")]),
        fps_base=float(scene[(*r, b"frs_sec_base")]),
        resolution_x=int(scene[(*r, b"xsch")]),
        resolution_y=int(scene[(*r, b"ysch")]),
        resolution_percentage=int(scene[(*r, b"size")]),
        camera=camera.id_name[2:].decode("utf-8", "replace") if camera and camera.id_name else None,
        engine=engine,
        samples=_samples(scene, engine, cycles),
        denoising=denoising,
        view_layers=_view_layers(scene),
        file_format=_IMTYPES.get(imtype, f"imtype {imtype}"),
        color_depth=_DEPTHS.get(depth, str(depth)),
        color_mode=_PLANES.get(planes, str(planes)),
        cameras=tuple(
            sorted(
                (block.id_name or b"OB?")[2:].decode("utf-8", "replace")
                for block in bfile.find_blocks_from_code(b"OB")
                if block.get(b"type", default=None) == _OB_CAMERA
            )
        ),
    )


def read_scene(path: Path, *, cached: bool = False) -> SceneInfo:
    """Read the render settings of the scene `path` opens with; SpecError if it cannot be read.
    `cached`: leave the parsed file in BAT's cache for farm.blender.assets.trace_scene, which reads the
    same file next and closes the cache (`farm submit`: one parse of the .blend, not two)."""
    try:
        bfile = bat.open_cached(path) if cached else bat.BlendFile(path)
    except SpecError:
        raise
    except Exception as exc:  # BAT raises many kinds (struct.error, KeyError, its own errors)
        raise SpecError(
            f"{path}: cannot be read as a .blend file, it may be truncated or damaged ({exc}); "
            "save it again"
        ) from exc
    try:
        _check_complete(bfile, path)
        return _info(bfile)
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"{path}: the .blend file is damaged ({exc!r}); save it again") from exc
    finally:
        if not cached:
            bfile.close()
