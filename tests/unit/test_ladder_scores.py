"""A ladder segment's score per rendition (farm.media.quality.renditions_score_argv and
parse_scores), and how status and the job page show each rung's."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from farm.core.report import job_summary, status_table, to_text
from farm.core.spec import Rung
from farm.media.ffgraph import EncodeSettings
from farm.media.quality import parse_scores, renditions_score_argv
from farm.media.transcode_graph import SegmentCut
from farm.web.jobpage import job_page

RUNGS = (
    Rung(width=640, height=360, bitrate_kbps=800),
    Rung(width=256, height=144, bitrate_kbps=200),
)
CUT = SegmentCut(first=24, end=48, total=96, rate=Fraction(24), start_pts=0, seek_s=0.5)
SETTINGS = EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24), quality=23,
                          preset="ultrafast")  # fmt: skip
RUN = """\
[psnr@r1 @ 0x56] PSNR y:32.6 u:33.5 v:32.1 average:32.663617 min:31.3 max:33.9
[ssim@r1 @ 0x57] SSIM Y:0.942396 (12.39) U:0.956172 (13.58) V:0.965895 (14.67) All:0.948609 (12.89)
[psnr@r0 @ 0x58] PSNR y:44.5 u:42.8 v:42.6 average:43.888656 min:39.6 max:46.0
[ssim@r0 @ 0x59] SSIM Y:0.995465 (23.43) U:0.994329 (22.46) V:0.996682 (24.79) All:0.995479 (23.44)
"""


def test_each_rungs_summaries_are_read_by_their_filters_names_in_rung_order() -> None:
    scores = parse_scores(RUN, 24, 2)
    assert [(s.ssim, s.psnr_db, s.frames) for s in scores] == [
        (0.995479, 43.888656, 24), (0.948609, 32.663617, 24)
    ]  # fmt: skip


def test_a_rung_without_its_summary_is_named() -> None:
    with pytest.raises(ValueError, match="rendition 1"):
        parse_scores(RUN.replace("ssim@r1", "ssim@r9"), 24, 2)


def test_the_master_is_decoded_once_and_scaled_to_each_rung_as_the_ladder_does() -> None:
    argv = renditions_score_argv(
        ffmpeg_bin="ffmpeg", renditions=[Path("/w/a.mp4"), Path("/w/b.mp4")],
        source=Path("/m/m.mov"), cut=CUT, rungs=RUNGS, settings=SETTINGS, pix_fmt="yuv420p",
    )  # fmt: skip
    inputs = [argv[n + 1] for n, a in enumerate(argv) if a == "-i"]
    assert inputs == ["file:/m/m.mov", "file:/w/a.mp4", "file:/w/b.mp4"]
    assert argv[argv.index("file:/m/m.mov") - 4 : argv.index("file:/m/m.mov")] == [
        "-noaccurate_seek", "-ss", "0.500000", "-i"
    ]  # fmt: skip
    graph = argv[argv.index("-filter_complex") + 1]
    assert graph.count("[0:v:0]") == 1 and "split=2[s0][s1]" in graph
    assert "[s0]scale=w=640:h=360:flags=lanczos,format=yuv420p[r0]" in graph
    assert "[s1]scale=w=256:h=144:flags=lanczos,format=yuv420p[r1]" in graph
    assert "[m1a][r1a]ssim@r1[q1]" in graph and "[m1b][r1b]psnr@r1[p1]" in graph
    assert argv[-11:] == ["-map", "[q0]", "-map", "[p0]", "-map", "[q1]", "-map", "[p1]",
                          "-f", "null", "-"]  # fmt: skip


def _ladder_summary() -> dict[str, object]:
    spec = {"kind": "transcode", "source_name": "m.mov",
            "ladder": [{"width": 640, "height": 360, "bitrate_kbps": 800},
                       {"width": 256, "height": 144, "bitrate_kbps": 200}]}  # fmt: skip
    job = {"id": "j-l", "kind": "transcode", "state": "done", "spec": json.dumps(spec),
           "chunks_total": "2", "chunks_done": "2"}  # fmt: skip
    chunks = [
        {"index": "0", "state": "done", "frames": "[0, 1]", "ssim": "0.948", "psnr_db": "32.6",
         "rungs_ssim": "0.995,0.948", "rungs_psnr_db": "43.8,32.6"},
        {"index": "1", "state": "done", "frames": "[2, 3]", "ssim": "0.94", "psnr_db": "31.0",
         "rungs_ssim": "0.991,0.94", "rungs_psnr_db": "42.0,31.0"},
    ]  # fmt: skip
    return job_summary(job, chunks, now=2.0)


def test_status_json_and_the_page_show_each_rungs_score() -> None:
    summary = _ladder_summary()
    chunks: list[dict[str, object]] = summary["chunks"]  # type: ignore[assignment]
    assert chunks[0]["rungs"] == [
        {"ssim": 0.995, "psnr_db": 43.8},
        {"ssim": 0.948, "psnr_db": 32.6},
    ]
    rungs = summary["quality"]["rungs"]  # type: ignore[index]
    assert rungs[1] == {"ssim_worst": 0.94, "ssim_mean": 0.944, "psnr_worst_db": 31.0,
                        "psnr_mean_db": 31.8}  # fmt: skip
    text = to_text(status_table(summary))
    assert "(each its worst rendition)" in text
    assert "rung 640x360@800k: SSIM worst 0.9910 mean 0.9930" in text
    assert "rung 256x144@200k: SSIM worst 0.9400 mean 0.9440" in text
    assert "r0 0.9950/43.8  r1 0.9480/32.6" in text
    page = job_page(summary, chunk_times={}, thumbs=[], logs={}, cost=None, now=2.0)
    assert '<li class="rung" data-rung="1">256x144@200k: SSIM worst 0.9400, mean 0.9440' in page
    assert '<td class="score">r0 0.9910/42.0  r1 0.9400/31.0</td>' in page
