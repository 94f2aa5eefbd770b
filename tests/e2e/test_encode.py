"""Encode jobs end to end: masters in, through `farm submit` on a real local farm, checked with
ffprobe frame by frame against the master and against a single-pass encode of it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LocalFarm
from tests.e2e.encode_media import (
    duration_s,
    frame_s,
    make_master,
    psnr_per_frame,
    single_pass,
    streams,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def masters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("masters")
    # 120 frames: enough for 4 and 5 segments, and each 4K encode (with its single-pass
    # reference and the per-frame PSNR) stays short.
    ntsc_film = {"size": "1920x1080", "rate": "24000/1001", "seconds": 5}
    return {
        "mov": make_master(d / "film.mov", **ntsc_film),  # type: ignore[arg-type]
        "mkv": make_master(d / "film.mkv", audio_codec="libvorbis", **ntsc_film),  # type: ignore[arg-type]
        "ntsc": make_master(
            d / "ntsc.mov", size="960x540", rate="30000/1001", seconds=3, start_s=10
        ),
        "vfr": make_master(d / "phone.mp4", size="960x540", rate="24", seconds=3, drop_every=5),
    }


def _encode(farm: LocalFarm, master: Path, dest: Path, *args: str) -> tuple[dict[str, Any], Path]:
    result = farm.farm("submit", str(master), "--preset", "ultrafast", *args, "--wait", "--json")
    assert result.returncode == 0, f"{result.stderr}\n{farm.logs()}"
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    out = dest / f"{master.stem}.mp4"
    farm.farm("fetch", summary["id"], str(out), check=True)
    summary["stderr"] = result.stderr
    return summary, out


def _assert_like_master(out: Path, master: Path, *, codec: str, size: tuple[int, int]) -> None:
    """Exact frame count, size and codec; audio present; durations within one frame."""
    got, src = streams(out), streams(master)
    video = next(s for s in got["streams"] if s["codec_type"] == "video")
    src_video = next(s for s in src["streams"] if s["codec_type"] == "video")
    one_frame = frame_s(video["avg_frame_rate"])
    assert int(video["nb_read_packets"]) == int(src_video["nb_read_packets"])
    assert (video["codec_name"], video["width"], video["height"]) == (codec, *size)
    assert abs(duration_s(video) - duration_s(src_video)) <= one_frame
    audio = [s for s in got["streams"] if s["codec_type"] == "audio"]
    src_audio = [s for s in src["streams"] if s["codec_type"] == "audio"]
    assert len(audio) == len(src_audio) == 1
    assert abs(duration_s(audio[0]) - duration_s(src_audio[0])) <= one_frame
    assert abs(duration_s(audio[0]) - duration_s(video)) <= one_frame + abs(
        duration_s(src_audio[0]) - duration_s(src_video)
    )


def _assert_no_frame_dropped_doubled_or_swapped(
    out: Path, master: Path, reference: Path, size: tuple[int, int], work: Path
) -> None:
    chunked = psnr_per_frame(out, master, size, work)
    single = psnr_per_frame(reference, master, size, work)
    assert len(chunked) == len(single)
    worst = min(range(len(chunked)), key=lambda i: chunked[i] - single[i])
    assert chunked[worst] >= single[worst] - 3, (
        f"frame {worst}: {chunked[worst]} dB vs {single[worst]}"
    )
    assert min(chunked) >= 30, f"frame {chunked.index(min(chunked))} is {min(chunked)} dB"


def _manifests(farm: LocalFarm, job_id: str) -> list[dict[str, Any]]:
    store = farm.store()
    return [store.get_json(k) for k in sorted(store.keys(f"jobs/{job_id}/manifests/"))]


def test_a_mov_master_becomes_4k_h264_frame_exact_with_its_audio(
    local_farm: LocalFarm, masters: dict[str, Path], tmp_path: Path
) -> None:
    size = (3840, 2160)
    summary, out = _encode(local_farm, masters["mov"], tmp_path, "--segment-frames", "24")
    assert (summary["kind"], summary["chunks_total"]) == ("transcode", 5)
    _assert_like_master(out, masters["mov"], codec="h264", size=size)
    reference = single_pass(masters["mov"], tmp_path / "ref.mp4", codec="h264", encoder="libx264",
                            size=size)  # fmt: skip
    _assert_no_frame_dropped_doubled_or_swapped(out, masters["mov"], reference, size, tmp_path)
    manifests = _manifests(local_farm, summary["id"])
    assert {m["encoder"]["name"] for m in manifests} == {"libx264"}
    # Each segment's worker checked the master's container itself before reading it.
    assert {m["master"]["container"] for m in manifests} == {"mov,mp4,m4a,3gp,3g2,mj2"}


def test_a_mkv_master_becomes_4k_hevc_and_its_vorbis_audio_aac(
    local_farm: LocalFarm, masters: dict[str, Path], tmp_path: Path
) -> None:
    size = (3840, 2160)
    args = ("--codec", "hevc", "--segment-frames", "30", "--quality", "26")
    summary, out = _encode(local_farm, masters["mkv"], tmp_path, *args)
    assert summary["chunks_total"] == 4
    _assert_like_master(out, masters["mkv"], codec="hevc", size=size)
    audio = next(s for s in streams(out)["streams"] if s["codec_type"] == "audio")
    assert audio["codec_name"] == "aac"
    reference = single_pass(masters["mkv"], tmp_path / "ref.mp4", codec="hevc", encoder="libx265",
                            size=size, quality=26)  # fmt: skip
    _assert_no_frame_dropped_doubled_or_swapped(out, masters["mkv"], reference, size, tmp_path)


def test_a_2997_master_starting_at_ten_seconds_keeps_every_frame_and_its_sync(
    local_farm: LocalFarm, masters: dict[str, Path], tmp_path: Path
) -> None:
    size = (640, 360)
    summary, out = _encode(
        local_farm, masters["ntsc"], tmp_path, "--resolution", "640x360", "--segment-frames", "20"
    )
    assert summary["spec"]["master"]["start_pts"] > 0
    _assert_like_master(out, masters["ntsc"], codec="h264", size=size)
    video = next(s for s in streams(out)["streams"] if s["codec_type"] == "video")
    assert video["avg_frame_rate"] == video["r_frame_rate"] == "30000/1001"
    reference = single_pass(masters["ntsc"], tmp_path / "ref.mp4", codec="h264", encoder="libx264",
                            size=size)  # fmt: skip
    _assert_no_frame_dropped_doubled_or_swapped(out, masters["ntsc"], reference, size, tmp_path)


def test_a_variable_rate_master_comes_out_constant_at_its_average_rate_and_says_so(
    local_farm: LocalFarm, masters: dict[str, Path], tmp_path: Path
) -> None:
    summary, out = _encode(
        local_farm, masters["vfr"], tmp_path, "--resolution", "640x360", "--segment-frames", "16"
    )
    assert "variable frame rate" in summary["stderr"]
    master = summary["spec"]["master"]
    assert master["vfr"] is True
    video = next(s for s in streams(out)["streams"] if s["codec_type"] == "video")
    assert video["r_frame_rate"] == video["avg_frame_rate"] == master["avg_frame_rate"]
    assert int(video["nb_read_packets"]) == master["frame_count"] == summary["frames_total"]
    assert abs(duration_s(video) - master["duration_s"]) <= frame_s(master["avg_frame_rate"])


def _bad(kind: str, d: Path, masters: dict[str, Path]) -> Path:
    if kind == "corrupt":
        data = masters["mov"].read_bytes()
        (d / "cut.mov").write_bytes(data[: len(data) // 2])  # the moov atom is at the end
        return d / "cut.mov"
    if kind == "text":
        (d / "notes.mov").write_text("not a video\n")
        return d / "notes.mov"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=d=1", str(d / "tone.m4a")],
        check=True,
    )
    return d / "tone.m4a"


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("corrupt", "not a video ffprobe can read"),
        ("text", "not a video ffprobe can read"),
        ("audio-only", "has no video stream"),
    ],
)
def test_a_master_that_is_no_video_is_refused_and_nothing_is_queued(
    local_farm: LocalFarm, masters: dict[str, Path], tmp_path: Path, kind: str, words: str
) -> None:
    before = (local_farm.ledger().job_ids(1000), local_farm.store().keys("scenes/"))
    result = local_farm.farm("submit", str(_bad(kind, tmp_path, masters)))
    assert result.returncode == 2
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    assert (local_farm.ledger().job_ids(1000), local_farm.store().keys("scenes/")) == before
