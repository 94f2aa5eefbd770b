"""Masters whose names ffmpeg would read as a protocol or an option, transcoded on a real local
farm: each job reads exactly its own file (48 frames in, 48 out), or is refused cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LocalFarm, ffprobe

pytestmark = pytest.mark.e2e
FFMPEG = ["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]


def make_video(path: Path, seconds: float) -> Path:
    subprocess.run(
        [*FFMPEG, "-f", "lavfi", "-i", f"testsrc2=s=64x48:r=24:d={seconds}", "-c:v", "libx264",
         "-pix_fmt", "yuv420p", "-f", "mp4", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.mark.parametrize("name", ["file:one_frame.mp4", "-x.mov"])
def test_a_tricky_master_name_is_transcoded_from_that_very_file(
    local_farm: LocalFarm, tmp_path: Path, name: str
) -> None:
    """GIVEN a 48-frame master named `file:one_frame.mp4` (beside a 1-frame `one_frame.mp4`) or
    `-x.mov`, WHEN it is submitted from its folder, THEN the job is done with 48 frames."""
    make_video(tmp_path / "one_frame.mp4", 1 / 24)
    make_video(tmp_path / name, 2)
    result = subprocess.run(
        [sys.executable, "-m", "farm", "submit", "--resolution", "128x96", "--preset",
         "ultrafast", "--wait", "--json", "--", name],
        env=local_farm.env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{local_farm.logs()}"
    summary = json.loads(result.stdout)
    assert summary["state"] == "done", summary.get("error")
    out = tmp_path / "out.mp4"
    local_farm.farm("fetch", summary["id"], str(out), check=True)
    video = next(s for s in ffprobe(out)["streams"] if s["codec_type"] == "video")
    assert int(video["nb_read_frames"]) == 48
