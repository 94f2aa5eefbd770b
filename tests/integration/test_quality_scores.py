"""Segments scored against their master with Debian's ffmpeg (farm.media.quality): a starved one
scores lower than a good one, and segments at different CRFs (`--target-quality`) keep one
parameter set, so they join by stream copy frame for frame."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from farm.adapters import proc
from farm.media.ffgraph import EncodeSettings
from farm.media.mp4join import CannotJoin, Mp4Join
from farm.media.probe import probe_streams
from farm.media.quality import Score, parse_score, score_argv
from farm.media.transcode_graph import SegmentCut, segment_argv
from tests.e2e.encode_media import make_master

RATE = Fraction(24)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_master(tmp_path_factory.mktemp("q") / "m.mov", seconds=2, size="640x360",
                       rate="24")  # fmt: skip


def _cut(first: int, end: int) -> SegmentCut:
    return SegmentCut(first=first, end=end, total=48, rate=RATE, start_pts=0)


def _encode(
    master: Path, out: Path, cut: SegmentCut, encoder: str, crf: int, varied: bool = True
) -> Path:
    settings = EncodeSettings(codec="h264" if encoder == "libx264" else "hevc", encoder=encoder,
                              fps=RATE, quality=crf, preset="ultrafast",
                              varied_quality=varied)  # fmt: skip
    argv = segment_argv(ffmpeg_bin="ffmpeg", source=master, out=str(out), cut=cut, width=320,
                        height=180, settings=settings)  # fmt: skip
    done = proc.capture(argv, 300)
    assert done.returncode == 0, done.stderr
    return out


def _score(master: Path, segment: Path, cut: SegmentCut) -> Score:
    argv = score_argv(ffmpeg_bin="ffmpeg", segment=segment, source=master, cut=cut, width=320,
                      height=180, pix_fmt="yuv420p")  # fmt: skip
    done = proc.capture(argv, 300)
    assert done.returncode == 0, done.stderr
    return parse_score(done.stderr, cut.count)


def test_a_starved_segment_scores_lower_than_a_good_one(master: Path, tmp_path: Path) -> None:
    cut = _cut(12, 36)
    good = _score(master, _encode(master, tmp_path / "good.mp4", cut, "libx264", 16), cut)
    starved = _score(master, _encode(master, tmp_path / "bad.mp4", cut, "libx264", 51), cut)
    assert good.ssim > 0.97 and good.psnr_db > 35
    assert starved.ssim < good.ssim - 0.03
    assert starved.psnr_db < good.psnr_db - 5


def test_the_score_compares_the_frames_the_segment_was_cut_from(
    master: Path, tmp_path: Path
) -> None:
    """Scored against the master one frame off, the same segment scores clearly lower: the
    reference is cut exactly as the segment."""
    cut = _cut(12, 36)
    segment = _encode(master, tmp_path / "s.mp4", cut, "libx264", 16)
    right = _score(master, segment, cut)
    off = _score(master, segment, _cut(13, 37))
    assert off.psnr_db < right.psnr_db - 3


@pytest.mark.parametrize("encoder", ["libx264", "libx265"])
def test_segments_at_different_crfs_join_by_copy_whole(
    master: Path, tmp_path: Path, encoder: str
) -> None:
    parts = [(_cut(0, 24), 18), (_cut(24, 48), 40)]
    paths = [_encode(master, tmp_path / f"{n}.mp4", cut, encoder, crf)
             for n, (cut, crf) in enumerate(parts)]  # fmt: skip
    out = tmp_path / "joined.mp4"
    with Mp4Join(out, frames=48) as join:  # refuses segments whose sample descriptions differ
        for path, (cut, _) in zip(paths, parts, strict=True):
            join.add(path, cut.count)
        join.finish()
    assert probe_streams("ffprobe", out).frames == 48
    decoded = proc.capture(["ffmpeg", "-v", "error", "-i", str(out), "-f", "null", "-"], 300)
    assert decoded.returncode == 0 and not decoded.stderr.strip(), decoded.stderr


def test_without_it_x264_segments_at_different_crfs_would_not_join(
    master: Path, tmp_path: Path
) -> None:
    """The reason for `stitchable`: x264 writes the CRF into its PPS, so the avcC differs."""
    a = _encode(master, tmp_path / "a.mp4", _cut(0, 24), "libx264", 18, varied=False)
    b = _encode(master, tmp_path / "b.mp4", _cut(24, 48), "libx264", 40, varied=False)
    with Mp4Join(tmp_path / "j.mp4", frames=48) as join, pytest.raises(CannotJoin):
        join.add(a, 24)
        join.add(b, 24)
