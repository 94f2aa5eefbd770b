"""A ladder of renditions from one encode job, packaged for HLS and DASH, end to end on the local
farm, checked as a player reads it: the master playlist and the MPD parsed, every rendition's
segments decoded to the master's frame count at its rung's size, keyframes aligned across them,
and each audio language an alternate rendition."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import requests

from farm.media.package import parse_playlist
from tests.conftest import LocalFarm
from tests.e2e.encode_media import FFMPEG
from tests.e2e.player import play
from tests.e2e.test_web_live import _auth

pytestmark = pytest.mark.e2e

FRAMES = 60
RUNGS = [(640, 360), (426, 240), (256, 144)]
DASH = "{urn:mpeg:dash:schema:mpd:2011}"


def _master(path: Path) -> Path:
    """640x360, 60 frames at 24 fps (2.5 s), long open GOPs, two tones tagged eng and fra, and
    English subtitles (mov_text, from an SRT)."""
    srt = path.with_suffix(".srt")
    srt.write_text("1\n00:00:00,500 --> 00:00:02,000\nA line to read\n")
    argv = [*FFMPEG, "-f", "lavfi", "-i", "testsrc2=s=640x360:r=24:d=2.5",
            "-f", "lavfi", "-i", "sine=f=440:r=48000:d=2.5",
            "-f", "lavfi", "-i", "sine=f=660:r=48000:d=2.5", "-i", str(srt),
            "-map", "0:v", "-map", "1:a", "-map", "2:a", "-map", "3:s",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
            "-x264-params", "open-gop=1:keyint=30:bframes=3:b-adapt=0", "-c:a", "aac",
            "-c:s", "mov_text", "-metadata:s:a:0", "language=eng", "-metadata:s:a:1",
            "language=fra", "-metadata:s:s:0", "language=eng", str(path)]  # fmt: skip
    subprocess.run(argv, check=True)
    return path


def _probe(path: Path, *entries: str) -> list[str]:
    shown = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", *entries, "-of", "csv=p=0",
         str(path)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return [line.strip().rstrip(",") for line in shown.stdout.splitlines() if line.strip()]


def _played(folder: Path, media_uri: str, tmp: Path) -> Path:
    """A media playlist's init segment and segments, end to end, as a player's buffer holds them."""
    media = parse_playlist((folder / media_uri).read_text())
    assert media.ended and media.init
    whole = tmp / (Path(media_uri).stem + ".mp4")
    whole.write_bytes(b"".join((folder / u).read_bytes() for u in [media.init] +
                               [u for _, u in media.segments]))  # fmt: skip
    return whole


def test_a_ladder_job_packages_every_rendition_for_hls_and_dash(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a 640x360 master with two audio languages
    master = _master(tmp_path / "ladder.mov")
    # WHEN it is submitted as a three-rung ladder, packaged for both HLS and DASH
    result = local_farm.farm(
        "submit", str(master), "--ladder", "360p,240p,144p", "--package", "both",
        "--segment-frames", "24", "--no-scene-cuts", "--preset", "ultrafast", "--wait", "--json",
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stderr}\n{local_farm.logs()}"
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    job_id = summary["id"]
    # THEN `farm status` names the package
    shown = local_farm.farm("status", job_id, check=True).stdout
    assert f"package jobs/{job_id}/output.package/ (both, 3 renditions)" in shown, shown
    # ... every rendition of every segment is scored against the master's frames at its rung's
    # size: the chunk keeps its worst rendition's score, and status, --json and the page each rung's
    for chunk in summary["chunks"]:
        rungs = chunk["rungs"]
        assert len(rungs) == len(RUNGS) and all(0.5 < r["ssim"] <= 1.0 for r in rungs), chunk
        assert chunk["ssim"] == min(r["ssim"] for r in rungs), chunk
        assert chunk["psnr_db"] == min(r["psnr_db"] for r in rungs), chunk
    assert len(summary["quality"]["rungs"]) == len(RUNGS), summary["quality"]
    for width, height in RUNGS:
        assert f"rung {width}x{height}@" in shown, shown
    page = requests.get(f"{local_farm.settings()['web_url']}/jobs/{job_id}",
                        auth=_auth(local_farm), timeout=30).text  # fmt: skip
    assert page.count('<li class="rung"') == len(RUNGS), page
    print(
        "ladder scoring:",
        sum(c["score_s"] for c in summary["chunks"]),
        "s scoring,",
        sum(c["encode_s"] for c in summary["chunks"]),
        "s encoding",
    )
    # ... `farm fetch` brings the video and the whole package, checked against its index
    fetched = local_farm.farm("fetch", job_id, str(tmp_path / "out.mp4"), check=True).stdout
    folder = tmp_path / "out-package"
    assert str(folder) in fetched, fetched
    assert int(_probe(tmp_path / "out.mp4", "-count_packets", "-show_entries",
                      "stream=nb_read_packets")[0]) == FRAMES  # fmt: skip
    # ... its master playlist lists each rung, and each audio language as an alternate
    top = parse_playlist((folder / "master.m3u8").read_text())
    sizes = [tuple(map(int, a["RESOLUTION"].split("x"))) for a, _ in top.variants]
    assert sizes == RUNGS
    assert all(a["AUDIO"] == "audio" and "avc1" in a["CODECS"] for a, _ in top.variants)
    assert [(m["TYPE"], m["LANGUAGE"]) for m in top.media] == [
        ("AUDIO", "eng"), ("AUDIO", "fra"), ("SUBTITLES", "eng")
    ]  # fmt: skip
    assert [m["DEFAULT"] for m in top.media if m["TYPE"] == "AUDIO"] == ["YES", "NO"]
    assert all(a["SUBTITLES"] == "subtitles" for a, _ in top.variants)
    subtitles = parse_playlist((folder / top.media[2]["URI"]).read_text())
    vtt = (folder / subtitles.segments[0][1]).read_text()
    assert vtt.startswith("WEBVTT") and "00:00.500 --> 00:02.000" in vtt and "A line to read" in vtt
    # ... each rendition, played from its playlist, has every frame at its rung's size, and
    # its keyframes fall on the same frames as every other rendition's
    keyframes = []
    for (_, uri), (width, height) in zip(top.variants, RUNGS, strict=True):
        whole = _played(folder, uri, tmp_path)
        shown = _probe(whole, "-count_packets", "-show_entries",
                       "stream=width,height,nb_read_packets")  # fmt: skip
        assert shown == [f"{width},{height},{FRAMES}"], (uri, shown)
        flags = _probe(whole, "-show_entries", "packet=flags")
        keyframes.append([n for n, f in enumerate(flags) if f.startswith("K")])
    assert keyframes[0][0] == 0 and all(k == keyframes[0] for k in keyframes), keyframes
    for media in top.media[:2]:  # each language's audio plays for the length of the video
        whole = _played(folder, media["URI"], tmp_path)
        seconds = subprocess.run(
            ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0",
             str(whole)], check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        assert abs(float(seconds) - FRAMES / 24) < 0.1, (media, seconds)
    # ... and the MPD holds the same renditions and one adaptation set per language
    mpd = ET.fromstring((folder / "manifest.mpd").read_text())
    sets = mpd.findall(f"{DASH}Period/{DASH}AdaptationSet")
    videos = [r for s in sets if s.get("contentType") == "video"
              for r in s.findall(f"{DASH}Representation")]  # fmt: skip
    assert [(int(r.get("width", 0)), int(r.get("height", 0))) for r in videos] == RUNGS
    assert [s.get("lang") for s in sets if s.get("contentType") == "audio"] == ["eng", "fra"]
    texts = [s for s in sets if s.get("contentType") == "text"]
    assert [(s.get("lang"), s.get("mimeType")) for s in texts] == [("eng", "text/vtt")]
    assert texts[0].findtext(f"{DASH}Representation/{DASH}BaseURL") == subtitles.segments[0][1]
    # ... and the job page plays it: hls.js (served by the farm) reads the master playlist, and
    # the browser decodes a rendition past its first second
    player = play(local_farm, f"/jobs/{job_id}#play", tmp_path, "ladder")
    assert not player["error"], player
    assert {tuple(map(int, v.split("x"))) for v in player["levels"].split(",")} == set(RUNGS)
    assert player["time"] >= 1.0 and player["height"] in {h for _, h in RUNGS}, player
