"""HDR masters made with ffmpeg, read at submit (ffprobe) and cut into one segment with each
software encoder the farm uses: the segment's first frame shows what the master's did."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from farm.adapters import proc
from farm.core.hdr import HdrInfo
from farm.media.ffgraph import EncodeSettings
from farm.media.hdr import probe_hdr
from farm.media.transcode_graph import SegmentCut, segment_argv
from tests.hdr_media import MAX_CLL, TAGS, first_frame, make_hdr_master, side_data

MASTERING = "Mastering display metadata"
LIGHT = "Content light level metadata"


@pytest.fixture(scope="module")
def pq(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hdr_master(tmp_path_factory.mktemp("pq") / "pq.mp4", seconds=1)


@pytest.fixture(scope="module")
def hlg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hdr_master(tmp_path_factory.mktemp("hlg") / "hlg.mov", transfer="arib-std-b67",
                           seconds=1)  # fmt: skip


def _segment(master: Path, out: Path, hdr: HdrInfo | None, codec: str, encoder: str) -> Path:
    settings = EncodeSettings(codec=codec, encoder=encoder, fps=Fraction(24), quality=30,
                              preset="ultrafast", hdr=hdr)  # fmt: skip
    cut = SegmentCut(first=0, end=12, total=24, rate=Fraction(24), start_pts=0)
    argv = segment_argv(ffmpeg_bin="ffmpeg", source=master, out=str(out), cut=cut, width=320,
                        height=180, settings=settings)  # fmt: skip
    done = proc.capture(argv, 300)
    assert done.returncode == 0, done.stderr
    return out


def test_the_submit_reads_an_hdr10_masters_metadata_and_an_hlg_masters_tags(
    pq: Path, hlg: Path
) -> None:
    hdr10 = probe_hdr("ffprobe", pq)
    assert hdr10 is not None and hdr10.mastering is not None
    assert (hdr10.transfer, hdr10.mastering.max_luminance, hdr10.max_cll) == (
        "smpte2084", 10000000, MAX_CLL[0]
    )  # fmt: skip
    tags = probe_hdr("ffprobe", hlg)
    assert tags == HdrInfo(primaries="bt2020", transfer="arib-std-b67", matrix="bt2020nc")


def test_an_hlg_segment_keeps_its_tags(hlg: Path, tmp_path: Path) -> None:
    out = _segment(hlg, tmp_path / "s.mp4", probe_hdr("ffprobe", hlg), "hevc10", "libx265")
    got = first_frame(out)
    assert [got[t] for t in TAGS] == ["bt2020", "arib-std-b67", "bt2020nc"]
    assert got["pix_fmt"] == "yuv420p10le"


def test_an_svtav1_segment_carries_hdr10_metadata_in_ten_bits(pq: Path, tmp_path: Path) -> None:
    out = _segment(pq, tmp_path / "s.mp4", probe_hdr("ffprobe", pq), "av1", "libsvtav1")
    got = first_frame(out)
    assert [got[t] for t in TAGS] == ["bt2020", "smpte2084", "bt2020nc"]
    assert got["pix_fmt"] == "yuv420p10le"
    # AV1 stores the values in its own fixed point: equal to the master's within its precision
    mastering, want = side_data(got, MASTERING), side_data(first_frame(pq), MASTERING)
    assert mastering is not None and want is not None
    for key in ("red_x", "green_y", "white_point_x", "max_luminance"):
        assert abs(float(Fraction(mastering[key])) - float(Fraction(want[key]))) < 1e-3, key
    assert side_data(got, LIGHT) == side_data(first_frame(pq), LIGHT)


def test_an_hlg_master_tone_maps_to_bt709(hlg: Path, tmp_path: Path) -> None:
    hdr = probe_hdr("ffprobe", hlg)
    assert hdr is not None
    mapped = HdrInfo(primaries=hdr.primaries, transfer=hdr.transfer, matrix=hdr.matrix,
                     tonemap=True)  # fmt: skip
    out = _segment(hlg, tmp_path / "s.mp4", mapped, "h264", "libx264")
    got = first_frame(out)
    assert [got[t] for t in TAGS] == ["bt709", "bt709", "bt709"]
    assert got["pix_fmt"] == "yuv420p"
