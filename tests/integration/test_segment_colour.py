"""A render's frames as video, the way a player shows them: BT.709, said so in the stream.

Players read an untagged HD or 4K stream as BT.709; ffmpeg left to itself converts RGB with
BT.601's matrix. The segment is decoded here as a player would (BT.709, limited range) and its
pixels compared with the frame's."""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from farm.media.ffgraph import EncodeSettings, frames_to_segment_argv

PATCHES = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "grey": (128, 128, 128)}


def _frame(path: Path, rgb: tuple[int, int, int]) -> None:
    colour = "0x" + "".join(f"{c:02x}" for c in rgb)
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         f"color=c={colour}:s=64x64,format=rgb24", "-frames:v", "1", str(path)],
        check=True,
    )  # fmt: skip


def _as_a_player_sees_it(video: Path) -> tuple[int, ...]:
    """The first frame's middle pixel, converted with the BT.709 matrix players use for HD."""
    raw = subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-i", str(video), "-frames:v", "1",
         "-vf", "scale=in_color_matrix=bt709:in_range=tv,crop=2:2", "-f", "rawvideo",
         "-pix_fmt", "rgb24", "-"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return tuple(raw[:3])


@pytest.mark.parametrize(
    ("codec", "encoder"), [("h264", "libx264"), ("hevc10", "libx265"), ("prores", "prores_ks")]
)
@pytest.mark.parametrize("name", list(PATCHES))
def test_a_segment_shows_the_frames_colours(
    tmp_path: Path, codec: str, encoder: str, name: str
) -> None:
    (tmp_path / "seq").mkdir()
    _frame(tmp_path / "seq" / "000000.png", PATCHES[name])
    out = tmp_path / ("s.mov" if codec == "prores" else "s.mp4")
    argv = frames_to_segment_argv(
        ffmpeg_bin="ffmpeg", pattern=tmp_path / "seq" / "%06d.png", out=out,
        settings=EncodeSettings(codec=codec, encoder=encoder, fps=Fraction(24)), frame_count=1,
    )  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True)
    shown = _as_a_player_sees_it(out)
    assert all(abs(a - b) <= 4 for a, b in zip(shown, PATCHES[name], strict=True)), shown
    stream = json.loads(
        subprocess.run(
            [
                "ffprobe",
                "-v",
                "error",
                "-select_streams",
                "v:0",
                "-show_entries",
                "stream=color_space,color_primaries,color_transfer",
                "-of",
                "json",
                str(out),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )["streams"][0]
    assert stream == {"color_space": "bt709", "color_primaries": "bt709", "color_transfer": "bt709"}
