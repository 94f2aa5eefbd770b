"""`--check-frames` with the real ffmpeg (farm.media.framecheck): black and flat frames found by
signalstats, NaN found in an EXR that Blender wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from farm.media.framecheck import (
    BLACK,
    FLAT,
    flagged,
    floats_argv,
    nan_count,
    stats_argv,
)

# Run by the bpy wheel (the farm's Blender): an 8x4 float image, NaN in one pixel's RGB when
# asked, saved as OpenEXR.
EXR = """
import sys
import bpy
import numpy as np

image = bpy.data.images.new("frame", 8, 4, float_buffer=True, alpha=True)
pixels = np.full((4, 8, 4), 0.5, np.float32)
if sys.argv[2] == "nan":
    pixels[1, 2, :3] = np.nan
image.pixels.foreach_set(pixels.ravel())
image.filepath_raw = sys.argv[1]
image.file_format = "OPEN_EXR"
image.save()
"""


def _exr(path: Path, kind: str) -> Path:
    subprocess.run([sys.executable, "-I", "-c", EXR, str(path), kind], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    return path


def _nans(tmp_path: Path, exr: Path) -> int:
    raw = tmp_path / "planes.raw"
    subprocess.run(floats_argv(ffmpeg_bin="ffmpeg", source=exr, out=raw), check=True)
    return nan_count(raw, block_floats=5)  # blocks smaller than the image: every block read


def test_nan_pixels_of_an_exr_are_counted(tmp_path: Path) -> None:
    assert _nans(tmp_path, _exr(tmp_path / "nan.exr", "nan")) == 3


def test_an_exr_without_nan_counts_none(tmp_path: Path) -> None:
    assert _nans(tmp_path, _exr(tmp_path / "clean.exr", "clean")) == 0


def test_black_and_flat_frames_are_flagged_and_a_picture_is_not(tmp_path: Path) -> None:
    # GIVEN a black frame, a test picture and a flat blue one, numbered as the encode lays them
    sources = ["color=black:s=64x36", "testsrc=s=64x36", "color=0x336699:s=64x36"]
    for n, source in enumerate(sources):
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", source, "-frames:v", "1",
                        str(tmp_path / f"{n:06d}.png")], check=True)  # fmt: skip
    # WHEN their stats are read
    stats = tmp_path / "stats, of: frames.txt"  # a name the filter graph must escape
    argv = stats_argv(ffmpeg_bin="ffmpeg", pattern=tmp_path / "%06d.png", stats=stats)
    subprocess.run(argv, check=True)
    # THEN frames 21 and 23 (as the job numbers them) are flagged, 22 is not
    assert flagged([21, 22, 23], stats.read_text()) == ({21: BLACK, 23: FLAT}, [])
