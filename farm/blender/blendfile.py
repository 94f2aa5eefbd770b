"""What a .blend file says about its own render, read without running Blender (pure Python, BAT).

blender-asset-tracer parses the file's DNA; this module picks the scene's render settings out of it
and turns anything unreadable into a SpecError the user can act on.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from blender_asset_tracer import blendfile as bat
from blender_asset_tracer.blendfile import header, iterators, magic_compression

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
_R_EXTENSION = 1 << 4
"""RenderData.scemode: File Extensions (use_file_extension) on."""
_ZSTD, _ZSTD_SEEKABLE = b"\x28\xb5\x2f\xfd", b"\xb1\xea\x92\x8f"
_MIB = 1024 * 1024
_RATIO_FLOOR_BYTES = 64 * _MIB
"""The compression-ratio cap applies past this much output: a small file full of zeros (a new
scene's empty images) compresses far better than a real one, and costs nothing to read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BlendCaps:
    """Bounds on reading an untrusted .blend at submit (farm.blender.isolated runs the read).
    The defaults pass the largest studio scenes: multi-GB files exist, Blender's zstd packs a
    real scene 3-10x, a big production links a few hundred libraries and a 4 GiB file holds about
    a million blocks; each cap is a `FARM_BLEND_MAX_*` setting."""

    max_file_bytes: int = 8 * 1024 * _MIB
    max_decompressed_bytes: int = 16 * 1024 * _MIB
    max_ratio: float = 100.0
    max_libraries: int = 2_000
    max_blocks: int = 4_000_000
    memory_bytes: int = 4 * 1024 * _MIB
    """Address space the read may take beyond what the command had mapped (RLIMIT_AS): BAT
    keeps about 320 bytes per block, 1.3 GB at max_blocks."""
    timeout_s: float = 120.0

    @classmethod
    def from_settings(cls, settings: Any) -> BlendCaps:
        """The caps a command's settings (farm.adapters.settings.Settings) ask for."""
        return cls(
            max_file_bytes=settings.blend_max_file_mb * _MIB,
            max_decompressed_bytes=settings.blend_max_decompressed_mb * _MIB,
            max_ratio=settings.blend_max_ratio,
            max_libraries=settings.blend_max_libraries,
            max_blocks=settings.blend_max_blocks,
            memory_bytes=settings.blend_parse_memory_mb * _MIB,
            timeout_s=settings.blend_parse_timeout_s,
        )


def _over(path: Path, what: str, measured: str, setting: str, cap: str) -> SpecError:
    return SpecError(
        f"{path}: {what} ({measured}, the cap is {cap}); farm refuses to read it, as it would a "
        f".blend made to exhaust this machine. If the scene is real, raise {setting}"
    )


def _size(count: float) -> str:
    return f"{count / _MIB:,.0f} MiB" if count >= _MIB else f"{count / 1024:,.0f} KiB"


class BoundedOpener:
    """BAT's `magic_compression.open` with caps: file size, bytes and ratio decompressed, blocks
    and linked libraries per file, and .blend files opened in all. BAT has no hook for limits, so
    the read's child process (farm.blender.isolated) puts this in its place; decompressed files
    go to the child's temp dir, which its parent removes whatever happens."""

    def __init__(self, caps: BlendCaps) -> None:
        self.caps = caps
        self.opened = 0

    def __call__(self, path: Path, mode: str, buffer_size: int) -> Any:
        self.opened += 1
        if self.opened - 1 > self.caps.max_libraries:
            raise _over(path, "the scene links more libraries than farm reads",
                        f"{self.opened - 1} opened", "FARM_BLEND_MAX_LIBRARIES",
                        f"{self.caps.max_libraries}")  # fmt: skip
        size = path.stat().st_size
        if size > self.caps.max_file_bytes:
            raise _over(path, "the .blend file is too large", _size(size),
                        "FARM_BLEND_MAX_FILE_MB", _size(self.caps.max_file_bytes))  # fmt: skip
        with path.open("rb") as fh:
            kind = magic_compression.find_compression_type(fh)
        if kind in (magic_compression.Compression.NONE, magic_compression.Compression.UNRECOGNISED):
            opened = _BAT_OPEN(path, mode, buffer_size)
        else:
            opened = self._decompressed(path, kind, size, buffer_size)
        self._count_blocks(path, opened.fileobj)
        return opened

    def _decompressed(
        self, path: Path, kind: magic_compression.Compression, size: int, buffer_size: int
    ) -> Any:
        """BAT's decompression to a temporary file, stopped at the caps on bytes and ratio."""
        out = tempfile.NamedTemporaryFile()  # noqa: SIM115 (BAT closes it with the BlendFile)
        written = 0
        with path.open("rb") as raw, magic_compression._decompressor(raw, "rb", kind) as stream:
            if (
                stream.read(len(magic_compression.BLENDFILE_MAGIC))
                != magic_compression.BLENDFILE_MAGIC
            ):
                out.close()
                raise SpecError(f"{path}: the compressed file is not a .blend file")
            out.write(magic_compression.BLENDFILE_MAGIC)
            written = len(magic_compression.BLENDFILE_MAGIC)
            while data := stream.read(buffer_size):
                written += len(data)
                if written > self.caps.max_decompressed_bytes:
                    out.close()
                    raise _over(path, "the .blend file decompresses to too much",
                                f"over {_size(written)}", "FARM_BLEND_MAX_DECOMPRESSED_MB",
                                _size(self.caps.max_decompressed_bytes))  # fmt: skip
                if written > _RATIO_FLOOR_BYTES and written > self.caps.max_ratio * size:
                    out.close()
                    raise _over(path, "the .blend file decompresses far more than a scene does",
                                f"over {written / size:,.0f}:1, {_size(size)} to over {_size(written)}",
                                "FARM_BLEND_MAX_RATIO", f"{self.caps.max_ratio:g}:1")  # fmt: skip
                out.write(data)
        out.flush()
        return magic_compression.DecompressedFileInfo(
            is_compressed=True, path=Path(out.name), fileobj=out
        )

    def _count_blocks(self, path: Path, fileobj: IO[bytes]) -> None:
        """Block headers only, before BAT loads them all: the number of blocks and of linked
        libraries (LI) in this file against their caps."""
        head = header.BlendFileHeader(fileobj, path)
        layout, fields = head.create_block_header_struct()
        blocks = libraries = 0
        while len(data := fileobj.read(layout.size)) == layout.size:
            block = fields(*layout.unpack(data))
            if block.code[:4] == b"ENDB":
                break
            if block.len < 0:
                raise SpecError(f"{path}: the .blend file is damaged (a block of negative size)")
            blocks += 1
            libraries += block.code[:2] == b"LI"
            if blocks > self.caps.max_blocks:
                raise _over(path, "the .blend file holds too many blocks", f"over {blocks - 1:,}",
                            "FARM_BLEND_MAX_BLOCKS", f"{self.caps.max_blocks:,}")  # fmt: skip
            fileobj.seek(block.len, os.SEEK_CUR)
        fileobj.seek(0, os.SEEK_SET)
        if libraries > self.caps.max_libraries:
            raise _over(path, "the .blend file links too many libraries", f"{libraries:,}",
                        "FARM_BLEND_MAX_LIBRARIES", f"{self.caps.max_libraries:,}")  # fmt: skip

    def install(self) -> None:
        """Put these caps in BAT's place, in the read's own child process only."""
        magic_compression.open = self


_BAT_OPEN = magic_compression.open


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


def _marker_cameras(scene: bat.BlendFileBlock) -> tuple[str, ...]:
    """The cameras the scene's timeline markers bind, each once, in frame order."""
    bound: list[tuple[int, str]] = []
    for marker in iterators.listbase(scene.get_pointer((b"markers", b"first"))):
        camera = marker.get_pointer(b"camera")
        if camera is not None and camera.id_name:
            bound.append((int(marker[b"frame"]), camera.id_name[2:].decode("utf-8", "replace")))
    return tuple(dict.fromkeys(name for _, name in sorted(bound)))


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
        output_path=scene.get((*r, b"pic"), null_terminated=True).decode("utf-8", "replace"),
        file_extension=bool(int(scene[(*r, b"scemode")]) & _R_EXTENSION),
        cameras=tuple(
            sorted(
                (block.id_name or b"OB?")[2:].decode("utf-8", "replace")
                for block in bfile.find_blocks_from_code(b"OB")
                if block.get(b"type", default=None) == _OB_CAMERA
            )
        ),
        marker_cameras=_marker_cameras(scene),
        view=_view(scene),
    )


def _view(scene: bat.BlendFileBlock) -> dict[str, Any]:
    """The scene's view and display settings (ColorManagedViewSettings, -DisplaySettings)."""
    view, display = b"view_settings", b"display_settings"
    return {
        "view_transform": scene.get((view, b"view_transform"), as_str=True) or "Standard",
        "look": scene.get((view, b"look"), as_str=True) or "None",
        "exposure": float(scene.get((view, b"exposure"), default=0.0)),
        "gamma": float(scene.get((view, b"gamma"), default=1.0)),
        "display_device": scene.get((display, b"display_device"), as_str=True) or "sRGB",
        "curves": bool(int(scene.get((view, b"flag"), default=0)) & 1),  # USE_CURVES
    }


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
