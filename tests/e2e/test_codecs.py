"""Deliverables beyond 8-bit: ProRes 422 HQ in .mov and 10-bit HEVC (Main10), for render and
transcode jobs alike, checked in the files as a player or an editor would read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DEMO, LocalFarm, ffprobe
from tests.e2e.encode_media import make_master

pytestmark = pytest.mark.e2e


def _deliver(farm: LocalFarm, source: Path, dest: Path, *args: str) -> tuple[Path, dict[str, Any]]:
    result = farm.farm("submit", str(source), *args, "--wait", "--json")
    assert result.returncode == 0, f"{result.stderr}\n{farm.logs()}"
    summary = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    fetched = farm.farm("fetch", summary["id"], str(dest) + "/", check=True).stdout.strip()
    out = Path(fetched.splitlines()[0])
    video = next(s for s in ffprobe(out)["streams"] if s["codec_type"] == "video")
    return out, video


RENDER = ["--frames", "1-4", "--chunk-size", "2", "--resolution", "320x180", "--samples", "2"]


def test_a_render_job_delivers_prores_422_hq_in_a_mov(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    out, video = _deliver(local_farm, DEMO, tmp_path, *RENDER, "--codec", "prores")
    assert out.suffix == ".mov"
    assert (video["codec_name"], video["profile"], video["pix_fmt"]) == (
        "prores",
        "HQ",
        "yuv422p10le",
    )
    assert (int(video["nb_read_frames"]), video["width"], video["height"]) == (4, 320, 180)


def test_a_render_job_delivers_10_bit_hevc(local_farm: LocalFarm, tmp_path: Path) -> None:
    out, video = _deliver(local_farm, DEMO, tmp_path, *RENDER, "--codec", "hevc10")
    assert out.suffix == ".mp4"
    assert (video["codec_name"], video["profile"], video["pix_fmt"]) == (
        "hevc",
        "Main 10",
        "yuv420p10le",
    )
    assert int(video["nb_read_frames"]) == 4


def test_a_transcode_job_delivers_prores_with_the_masters_audio(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    master = make_master(tmp_path / "m.mov", size="640x360", rate="24", seconds=2)
    out, video = _deliver(
        local_farm, master, tmp_path, "--codec", "prores", "--resolution", "1280x720",
        "--segment-frames", "24",
    )  # fmt: skip
    assert (video["codec_name"], video["profile"], int(video["nb_read_frames"])) == (
        "prores",
        "HQ",
        48,
    )
    assert [s["codec_type"] for s in ffprobe(out)["streams"]].count("audio") == 1


def test_prores_takes_no_quality_and_no_nvenc(local_farm: LocalFarm, tmp_path: Path) -> None:
    master = make_master(tmp_path / "m.mov", size="320x180", rate="24", seconds=1)
    for flags, words in (
        (["--quality", "20"], "no quality"),
        (["--encoder", "nvenc"], "no ProRes"),
    ):
        result = local_farm.farm("submit", str(master), "--codec", "prores", *flags)
        assert result.returncode == 2 and words in result.stderr, result.stderr
