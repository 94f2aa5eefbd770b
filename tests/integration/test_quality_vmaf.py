"""VMAF scored for real with imageio-ffmpeg's static ffmpeg (libvmaf, model vmaf_v0.6.1), in the
same graph as SSIM and PSNR and in the media box: a starved segment scores lower than a good
one, and a reference one frame off scores lower than the right one."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.adapters import proc
from farm.adapters.boxes import media_box
from farm.adapters.sandbox import wrap
from farm.adapters.settings import Settings
from farm.adapters.vmaf import IMAGEIO, find_vmaf
from farm.media.quality import Score, parse_score, score_argv
from farm.media.transcode_graph import SegmentCut
from tests.e2e.encode_media import make_master
from tests.integration.test_quality_scores import _cut, _encode


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_master(tmp_path_factory.mktemp("v") / "m.mov", seconds=2, size="640x360",
                       rate="24")  # fmt: skip


@pytest.fixture(scope="module")
def vmaf_ffmpeg() -> str:
    found = find_vmaf(IMAGEIO)
    assert not found.fault, found.fault  # a dependency of the farm: never a skip
    return found.binary


def _score(vmaf_ffmpeg: str, master: Path, segment: Path, cut: SegmentCut) -> Score:
    argv = score_argv(ffmpeg_bin=vmaf_ffmpeg, segment=segment, source=master, cut=cut,
                      width=320, height=180, pix_fmt="yuv420p", vmaf_threads=2)  # fmt: skip
    box = media_box(Settings(), readable=(master, segment.parent), programs=(vmaf_ffmpeg,))
    assert box is not None
    done = proc.capture(wrap(argv, box), 300)
    assert done.returncode == 0, done.stderr
    return parse_score(done.stderr, cut.count, vmaf=True)


def test_a_starved_segment_scores_lower_vmaf_than_a_good_one(
    master: Path, tmp_path: Path, vmaf_ffmpeg: str
) -> None:
    cut = _cut(12, 36)
    good = _score(vmaf_ffmpeg, master, _encode(master, tmp_path / "g.mp4", cut, "libx264", 16), cut)
    starved = _score(vmaf_ffmpeg, master, _encode(master, tmp_path / "b.mp4", cut, "libx264", 51),
                     cut)  # fmt: skip
    assert good.vmaf is not None and starved.vmaf is not None
    assert good.vmaf > 90
    assert starved.vmaf < good.vmaf - 20
    assert good.ssim > 0.97 and starved.ssim < good.ssim  # ffmpeg 9's summaries read as 5.1's


def test_vmaf_compares_the_frames_the_segment_was_cut_from(
    master: Path, tmp_path: Path, vmaf_ffmpeg: str
) -> None:
    cut = _cut(12, 36)
    segment = _encode(master, tmp_path / "s.mp4", cut, "libx264", 16)
    right = _score(vmaf_ffmpeg, master, segment, cut)
    off = _score(vmaf_ffmpeg, master, segment, _cut(13, 37))
    assert right.vmaf is not None and off.vmaf is not None
    assert off.vmaf < right.vmaf - 5
