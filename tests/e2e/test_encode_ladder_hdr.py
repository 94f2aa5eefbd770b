"""An HDR10 ladder end to end on the local farm: a PQ master with mastering display and content
light level laddered in HEVC Main10 and packaged for HLS and DASH, each rendition played from its
playlist and checked with ffprobe as a player reads it, and the playlists' HDR signalling parsed."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from farm.media.package import parse_playlist
from tests.conftest import LocalFarm
from tests.e2e.player import play
from tests.e2e.test_encode_ladder import _played
from tests.hdr_media import TAGS, first_frame, frames_with, make_hdr_master, side_data

pytestmark = pytest.mark.e2e

RUNGS = [(640, 360), (320, 180)]
FRAMES = 48
DASH = "{urn:mpeg:dash:schema:mpd:2011}"
CICP = "urn:mpeg:mpegB:cicp:"
MASTERING = "Mastering display metadata"
LIGHT = "Content light level metadata"


def _stream(path: Path) -> dict[str, Any]:
    shown = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "stream=codec_name,profile,pix_fmt,width,height", "-of", "json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    streams: list[dict[str, Any]] = json.loads(shown)["streams"]
    return streams[0]


def test_an_hdr10_master_ladders_into_hdr10_renditions_packaged_as_pq(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a 2 s 640x360 HEVC Main10 PQ master with mastering display and content light level
    master = make_hdr_master(tmp_path / "pq.mp4", size="640x360")
    # WHEN it is laddered in hevc10 into two rungs, packaged for HLS and DASH
    result = local_farm.farm(
        "submit", str(master), "--codec", "hevc10", "--ladder", "640x360@2M,320x180@600k",
        "--package", "both", "--segment-frames", "24", "--no-scene-cuts", "--preset",
        "ultrafast", "--score", "none", "--wait", "--json",
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stderr}\n{local_farm.logs()}"
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    local_farm.farm("fetch", summary["id"], str(tmp_path / "out.mp4"), check=True)
    folder = tmp_path / "out-package"
    # THEN the master playlist says every variant is PQ, in HEVC Main10 (hvc1.2.4...)
    top = parse_playlist((folder / "master.m3u8").read_text())
    assert [tuple(map(int, a["RESOLUTION"].split("x"))) for a, _ in top.variants] == RUNGS
    assert all(a["VIDEO-RANGE"] == "PQ" for a, _ in top.variants), top.variants
    assert all(a["CODECS"].startswith("hvc1.2.4.L") for a, _ in top.variants), top.variants
    # ... and each rendition, played from its playlist, is HEVC Main 10 in 10 bits, every frame
    # there, tagged BT.2020/PQ, with the master's mastering display and light level
    want = first_frame(master)
    for (_, uri), (width, height) in zip(top.variants, RUNGS, strict=True):
        whole = _played(folder, uri, tmp_path)
        stream = _stream(whole)
        assert (stream["codec_name"], stream["profile"], stream["pix_fmt"]) == (
            "hevc", "Main 10", "yuv420p10le"
        ), uri  # fmt: skip
        assert (stream["width"], stream["height"]) == (width, height)
        got = first_frame(whole)
        assert [got[t] for t in TAGS] == ["bt2020", "smpte2084", "bt2020nc"], uri
        for kind in (MASTERING, LIGHT):
            assert side_data(got, kind) == side_data(want, kind) is not None, (uri, kind)
        frames, tagged = frames_with(whole, MASTERING)
        assert frames == FRAMES and tagged >= 2, (uri, frames, tagged)  # each segment's IDR
    # ... and the MPD's video set carries the colour as CICP (PQ essential) and full codecs
    mpd = ET.fromstring((folder / "manifest.mpd").read_text())
    video = next(s for s in mpd.findall(f"{DASH}Period/{DASH}AdaptationSet")
                 if s.get("contentType") == "video")  # fmt: skip
    found = {(e.tag.removeprefix(DASH), e.get("schemeIdUri"), e.get("value")) for e in video
             if e.tag.endswith("Property")}  # fmt: skip
    assert found == {
        ("SupplementalProperty", CICP + "ColourPrimaries", "9"),
        ("EssentialProperty", CICP + "TransferCharacteristics", "16"),
        ("SupplementalProperty", CICP + "MatrixCoefficients", "9"),
    }
    reps = video.findall(f"{DASH}Representation")
    assert [(int(r.get("width", 0)), int(r.get("height", 0))) for r in reps] == RUNGS
    assert all(str(r.get("codecs")).startswith("hvc1.2.4.L") for r in reps)
    # ... and the job page plays it, or says on the page that this browser cannot decode it
    # (Debian's Chromium has no HEVC decoder) and what to do instead
    player = play(local_farm, f"/jobs/{summary['id']}#play", tmp_path, "ladder")
    if player.get("error"):
        assert "This browser cannot decode these renditions (hevc10)" in player["shown"], player
        assert "fetch the package" in player["shown"], player
    else:
        assert player["time"] >= 1.0, player
