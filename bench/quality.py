"""`python -m bench quality`: what scoring a segment costs, and what chunking costs in quality.

1. Scoring overhead: one 10 s 1080p segment (`--quick`: 2 s 640x360) encoded as a worker does
   (farm.media.transcode_graph.segment_argv, libx264 at the farm's default CRF and preset), then
   scored against the master (farm.media.quality.score_argv): every frame, and every 4th.
2. Chunked against single at equal bitrate: the same master in 2 s segments joined by copy
   (farm.media.mp4join), against one two-pass x264 encode of the whole master at the joined
   video's bitrate; each scored against the master (SSIM, PSNR).
All in one run, on one machine, side by side.
"""

from __future__ import annotations

import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from bench.common import Row
from farm.adapters import proc
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings
from farm.media.mp4join import Mp4Join
from farm.media.quality import Score, parse_score, score_argv
from farm.media.transcode_graph import SegmentCut, default_quality, segment_argv

RATE = Fraction(24)
SEGMENT_FRAMES = 48


def _timed(argv: list[str]) -> tuple[float, str]:
    started = time.monotonic()
    done = proc.capture(argv, 3600)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {done.stderr[-500:]}")
    return time.monotonic() - started, done.stderr


def _master(path: Path, size: str, seconds: int) -> Path:
    """Moving test pattern with film-like grain, nearly lossless (the reference)."""
    video = f"testsrc2=s={size}:r={RATE}:d={seconds},noise=alls=12:allf=t"
    _timed(["ffmpeg", *GLOBAL_ARGS, "-f", "lavfi", "-i", video, "-c:v", "libx264", "-preset",
            "ultrafast", "-qp", "4", "-pix_fmt", "yuv420p", str(path)])  # fmt: skip
    return path


def _cut(first: int, end: int, total: int) -> SegmentCut:
    return SegmentCut(first=first, end=end, total=total, rate=RATE, start_pts=0)


def _score(
    master: Path, video: Path, cut: SegmentCut, size: tuple[int, int], every: int = 1
) -> tuple[float, Score]:
    argv = score_argv(ffmpeg_bin="ffmpeg", segment=video, source=master, cut=cut, width=size[0],
                      height=size[1], pix_fmt="yuv420p", every=every)  # fmt: skip
    took, stderr = _timed(argv)
    return took, parse_score(stderr, cut.count)


def _encode(master: Path, out: Path, cut: SegmentCut, size: tuple[int, int], preset: str) -> float:
    settings = EncodeSettings(codec="h264", encoder="libx264", fps=RATE, preset=preset,
                              quality=default_quality("libx264"))  # fmt: skip
    argv = segment_argv(ffmpeg_bin="ffmpeg", source=master, out=str(out), cut=cut,
                        width=size[0], height=size[1], settings=settings)  # fmt: skip
    return _timed(argv)[0]


def _single_at(master: Path, out: Path, kbps: int, preset: str, work: Path) -> None:
    """The whole master in one two-pass x264 encode at `kbps`: the best that bitrate buys."""
    common = ["-c:v", "libx264", "-preset", preset, "-b:v", f"{kbps}k", "-pix_fmt", "yuv420p",
              "-passlogfile", str(work / "pass")]  # fmt: skip
    _timed(["ffmpeg", *GLOBAL_ARGS, "-i", str(master), *common, "-pass", "1", "-f", "null", "-"])
    _timed(["ffmpeg", *GLOBAL_ARGS, "-i", str(master), *common, "-pass", "2", str(out)])


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    size, seconds = ((640, 360), 2) if quick else ((1920, 1080), 10)
    preset = "medium"
    total = seconds * int(RATE)
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        work = Path(tmp)
        master = _master(work / "master.mkv", f"{size[0]}x{size[1]}", seconds)
        whole = _cut(0, total, total)
        # 1. A segment of the whole master: its encode, then its score.
        encode_s = _encode(master, work / "one.mp4", whole, size, preset)
        score_s, one = _score(master, work / "one.mp4", whole, size)
        score4_s, one4 = _score(master, work / "one.mp4", whole, size, every=4)
        # 2. In segments joined by copy, against one encode at the same bitrate.
        starts = list(range(0, total, SEGMENT_FRAMES))
        cuts = [_cut(s, min(s + SEGMENT_FRAMES, total), total) for s in starts]
        for n, cut in enumerate(cuts):
            _encode(master, work / f"s{n}.mp4", cut, size, preset)
        chunked = work / "chunked.mp4"
        with Mp4Join(chunked, frames=total) as join:
            for n, cut in enumerate(cuts):
                join.add(work / f"s{n}.mp4", cut.count)
            join.finish()
        kbps = round(chunked.stat().st_size * 8 / 1000 / seconds)
        single = work / "single.mp4"
        _single_at(master, single, kbps, preset, work)
        single_kbps = round(single.stat().st_size * 8 / 1000 / seconds)
        chunked_score = _score(master, chunked, whole, size)[1]
        single_score = _score(master, single, whole, size)[1]
    result = {
        "size": f"{size[0]}x{size[1]}",
        "seconds": seconds,
        "preset": preset,
        "crf": default_quality("libx264"),
        "segment_encode_s": round(encode_s, 2),
        "score_s": round(score_s, 2),
        "score_every_4th_s": round(score4_s, 2),
        "score_ratio": round(score_s / encode_s, 3),
        "ssim_every_frame": one.ssim,
        "ssim_every_4th": one4.ssim,
        "segment_frames": SEGMENT_FRAMES,
        "chunked_kbps": kbps,
        "single_kbps": single_kbps,
        "chunked_ssim": chunked_score.ssim,
        "chunked_psnr_db": chunked_score.psnr_db,
        "single_ssim": single_score.ssim,
        "single_psnr_db": single_score.psnr_db,
    }
    rows = [
        Row(
            bench="quality",
            case=f"score a {seconds} s {size[0]}x{size[1]} segment (SSIM+PSNR, every frame)",
            farm=f"{score_s:.1f} s (every 4th frame {score4_s:.1f} s)",
            baseline=f"{encode_s:.1f} s its x264 {preset} encode",
            ratio=score_s / encode_s,
            note=f"SSIM {one.ssim:.4f}, every 4th {one4.ssim:.4f}",
        ),
        Row(
            bench="quality",
            case=f"{seconds} s in {SEGMENT_FRAMES}-frame segments vs one 2-pass encode",
            farm=f"SSIM {chunked_score.ssim:.4f}, {chunked_score.psnr_db:.2f} dB at {kbps} kb/s",
            baseline=f"SSIM {single_score.ssim:.4f}, {single_score.psnr_db:.2f} dB at "
            f"{single_kbps} kb/s",
            ratio=(1 - chunked_score.ssim) / max(1 - single_score.ssim, 1e-9),
            note="ratio: SSIM loss (1 - SSIM) chunked over single",
        ),
    ]
    return result, rows
