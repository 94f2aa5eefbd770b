"""Reading a scene's own render settings from the .blend, without Blender (farm.blender.blendfile).

Fixtures are built by tests/unit/blends/build_fixtures.py with Blender 3.4 and known settings.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import pytest
import zstandard

from farm.blender.blendfile import read_scene
from farm.core.errors import SpecError
from farm.core.sources import SceneInfo

BLENDS = Path(__file__).parent / "blends"
TEXTURED = Path(__file__).resolve().parents[2] / "scenes" / "textured.blend"


def test_cycles_scene_settings_are_read_as_saved() -> None:
    info = read_scene(BLENDS / "cycles_2398.blend")
    assert info.scene == "Shot"
    assert info.blender_version == "3.4"
    assert (info.frame_start, info.frame_end, info.frame_step) == (1001, 1048, 2)
    assert (info.resolution_x, info.resolution_y, info.resolution_percentage) == (1920, 1080, 50)
    assert info.render_size == (960, 540)
    assert info.camera == "CamA"
    assert info.engine == "CYCLES"
    assert info.samples == 128
    assert info.denoising is True  # Cycles' default: the file stores no flag
    assert info.view_layers == ("Beauty", "Mattes")  # "Scratch" is not rendered
    assert (info.file_format, info.color_depth, info.color_mode) == (
        "OPEN_EXR_MULTILAYER",
        "32",
        "RGBA",
    )


def test_23_976_and_29_97_are_exact_fractions() -> None:
    cycles = read_scene(BLENDS / "cycles_2398.blend")
    eevee = read_scene(BLENDS / "eevee_2997.blend")
    assert (cycles.fps, round(cycles.fps_base, 6)) == (24, 1.001)
    assert cycles.rate == Fraction(24000, 1001)
    assert eevee.rate == Fraction(30000, 1001)


def test_eevee_scene_reads_its_own_samples_and_png_depth() -> None:
    info = read_scene(BLENDS / "eevee_2997.blend")
    assert info.engine == "BLENDER_EEVEE"
    assert info.samples == 16
    assert info.denoising is None
    assert (info.resolution_x, info.resolution_y) == (1001, 563)
    assert info.camera == "CamE"
    assert (info.file_format, info.color_depth, info.color_mode) == ("PNG", "16", "RGBA")


def test_workbench_scene_without_a_camera() -> None:
    info = read_scene(BLENDS / "workbench.blend")
    assert info.engine == "BLENDER_WORKBENCH"
    assert info.camera is None
    assert info.samples is None
    assert (info.frame_start, info.frame_end) == (5, 5)
    assert info.render_size == (1280, 720)  # 200%
    assert (info.file_format, info.color_depth, info.color_mode) == ("OPEN_EXR", "16", "RGB")


def test_the_demo_scene_with_texture_says_what_the_issue_asked() -> None:
    info = read_scene(TEXTURED)
    assert (info.frame_start, info.frame_end, info.fps, info.rate) == (11, 35, 25, 25)
    assert (info.resolution_x, info.resolution_y, info.resolution_percentage) == (320, 240, 100)
    assert (info.engine, info.samples, info.denoising) == ("CYCLES", 4, False)
    assert info.camera == "ShotCam"
    assert info.cameras == ("ShotCam",)


def test_scene_info_round_trips_through_json() -> None:
    info = read_scene(BLENDS / "cycles_2398.blend")
    assert SceneInfo.from_json(info.to_json()) == info


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    data = TEXTURED.read_bytes()
    for cut in (len(data) // 2, len(data) - 10):
        path = tmp_path / f"cut{cut}.blend"
        path.write_bytes(data[:cut])
        with pytest.raises(SpecError, match="cut"):
            read_scene(path)


def test_garbage_with_a_blender_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.blend"
    path.write_bytes(b"BLENDER-v405" + b"\x00\x17" * 500)
    with pytest.raises(SpecError, match=r"junk\.blend"):
        read_scene(path)


def _as_blender_5_file(src: Path, dest: Path) -> None:
    """Rewrite an uncompressed 3.x file in 5.0's layout: a 17-byte header and 32-byte block
    headers (code, SDNA index, old address, 64-bit length, 64-bit count)."""
    data = src.read_bytes()
    if data[:4] == b"\x28\xb5\x2f\xfd":  # zstd, as Blender's "Compress" saves
        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    assert data[:12] == b"BLENDER-v304"
    out = bytearray(b"BLENDER17-01v0500")
    pos = 12
    while True:
        code, length, old, sdna, count = struct.unpack_from("<4siQii", data, pos)
        pos += 24
        out += struct.pack("<4siQqq", code, sdna, old, length, count)
        if code == b"ENDB":
            break
        out += data[pos : pos + length]
        pos += length
    dest.write_bytes(bytes(out))


def test_blender_5_file_header_is_read(tmp_path: Path) -> None:
    five = tmp_path / "five.blend"
    _as_blender_5_file(TEXTURED, five)
    info = read_scene(five)
    assert info.blender_version == "5.0"
    assert (info.frame_start, info.frame_end, info.samples, info.camera) == (11, 35, 4, "ShotCam")
