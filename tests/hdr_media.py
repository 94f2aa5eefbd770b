"""HDR masters made with ffmpeg for the tests (libx265, 10-bit, tiny), and reading a video's
first frame's colour and side data as a player would (ffprobe)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

MASTER_DISPLAY = "G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1)"
"""P3 primaries, D65, 1000 cd/m2 peak and 0.0001 minimum, in x265's units."""
MAX_CLL = (1000, 400)
TAGS = ("color_primaries", "color_transfer", "color_space")


def make_hdr_master(
    path: Path, *, transfer: str = "smpte2084", seconds: int = 2, size: str = "320x180"
) -> Path:
    """`size` (320x180) 24 fps HEVC Main10, BT.2020 tagged with `transfer`; a PQ master carries
    HDR10's mastering display and content light level SEI, an HLG one none."""
    params = f"log-level=error:colorprim=bt2020:transfer={transfer}:colormatrix=bt2020nc"
    if transfer == "smpte2084":
        params += f":master-display={MASTER_DISPLAY}:max-cll={MAX_CLL[0]},{MAX_CLL[1]}"
        params += ":hdr10=1:repeat-headers=1"
    subprocess.run(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
         "-i", f"testsrc2=s={size}:r=24:d={seconds}", "-pix_fmt", "yuv420p10le",
         "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", params,
         "-color_primaries", "bt2020", "-color_trc", transfer, "-colorspace", "bt2020nc",
         "-tag:v", "hvc1", str(path)],
        check=True,
    )  # fmt: skip
    return path


def first_frame(path: Path) -> dict[str, Any]:
    """The first video frame's colour tags and side data, as ffprobe shows them."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-read_intervals", "%+#1",
         "-show_frames", "-show_entries",
         "frame=color_primaries,color_transfer,color_space,pix_fmt,side_data_list",
         "-of", "json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    frames: list[dict[str, Any]] = json.loads(out)["frames"]
    return frames[0]


def side_data(frame: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((s for s in frame.get("side_data_list", []) if s["side_data_type"] == kind), None)


def frames_with(path: Path, kind: str) -> tuple[int, int]:
    """(frames, frames carrying side data `kind`) over the whole video."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_frames", "-show_entries",
         "frame=side_data_list", "-of", "json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    frames = json.loads(out)["frames"]
    return len(frames), sum(1 for f in frames if side_data(f, kind))
