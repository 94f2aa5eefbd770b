"""HDR masters end to end on a real local farm: HDR10's colour tags and static metadata carried
into every segment and through the stitch, or tone-mapped to SDR when asked; checked with ffprobe
on the fetched output as a player reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import LocalFarm
from tests.e2e.farmtools import encode_small
from tests.hdr_media import TAGS, first_frame, frames_with, make_hdr_master, side_data

pytestmark = pytest.mark.e2e
MASTERING = "Mastering display metadata"
LIGHT = "Content light level metadata"


def test_an_hdr10_master_keeps_its_mastering_display_and_light_level_through_the_stitch(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a 2 s HEVC Main10 PQ master with mastering display and content light level SEI
    master = make_hdr_master(tmp_path / "pq.mp4")
    # WHEN it is transcoded to hevc10 in four segments and stitched
    out = tmp_path / "out.mp4"
    summary = encode_small(local_farm, master, out, "--codec", "hevc10")
    # THEN the output's first frame carries the master's tags and metadata, value for value
    got, want = first_frame(out), first_frame(master)
    assert [got[t] for t in TAGS] == [want[t] for t in TAGS] == ["bt2020", "smpte2084", "bt2020nc"]
    assert got["pix_fmt"] == "yuv420p10le"
    for kind in (MASTERING, LIGHT):
        assert side_data(got, kind) == side_data(want, kind) is not None, kind
    # AND every frame is there, and every segment's first frame carries it (the join kept it)
    frames, tagged = frames_with(out, MASTERING)
    assert frames == 48
    assert tagged >= summary["chunks_total"] == 4
    assert "its colour tags and HDR10 static metadata are kept" in summary["stderr"]


def test_an_hdr_master_is_tone_mapped_to_bt709_sdr_only_when_asked(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a PQ master, submitted for 8-bit H.264
    master = make_hdr_master(tmp_path / "pq.mp4", seconds=1)
    # WHEN it is submitted without --tonemap THEN it is refused at submit, saying what to do
    refused = local_farm.farm("submit", str(master), "--codec", "h264")
    assert refused.returncode == 2
    assert "--codec hevc10" in refused.stderr and "--tonemap" in refused.stderr
    # WHEN it is submitted with --tonemap THEN the output is SDR BT.709 with no HDR10 metadata
    out = tmp_path / "sdr.mp4"
    encode_small(local_farm, master, out, "--codec", "h264", "--tonemap")
    got = first_frame(out)
    assert [got[t] for t in TAGS] == ["bt709", "bt709", "bt709"]
    assert got["pix_fmt"] == "yuv420p"
    assert side_data(got, MASTERING) is None and side_data(got, LIGHT) is None
    assert frames_with(out, MASTERING) == (24, 0)
