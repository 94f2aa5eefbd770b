"""farm.media.quality, pure: the target, the scorer's argv and summaries, the probe windows and
the CRF search; farm.core.report's view of the scores."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from farm.core.errors import SpecError
from farm.core.report import (
    chunk_score_text,
    job_quality,
    job_summary,
    quality_lines,
    status_table,
    to_text,
)
from farm.media.quality import (
    MAX_PROBES,
    Target,
    chosen,
    next_probe,
    parse_score,
    parse_target,
    probe_cuts,
    score_argv,
    target_choice,
)
from farm.media.transcode_graph import SegmentCut
from farm.web.jobpage import job_page

FFMPEG_51 = """\
[Parsed_psnr_14 @ 0x55] PSNR y:46.210914 u:45.101670 v:44.808027 average:45.749673 min:44.78 max:47.40
[Parsed_ssim_13 @ 0x55] SSIM Y:0.995790 (23.757672) U:0.996525 (24.590388) V:0.997282 (25.656923) All:0.996161 (24.158289)
"""


def test_targets_are_read_and_written_back_alike() -> None:
    assert parse_target("SSIM=0.98") == Target(metric="ssim", value=0.98)
    assert str(parse_target(" psnr=40 ")) == "psnr=40"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("vmaf=100", "vmaf takes 20 to 99"),
        ("ssim", "write ssim=0.98, psnr=40 or vmaf=95"),
        ("ssim=high", "write ssim=0.98, psnr=40 or vmaf=95"),
        ("butteraugli=2", "write ssim=0.98, psnr=40 or vmaf=95"),
        ("ssim=1.5", "ssim takes 0.5 to 0.9999"),
        ("psnr=nan", "write ssim=0.98"),
        ("psnr=90", "psnr takes 20 to 70"),
    ],
)
def test_a_target_the_farm_cannot_search_is_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_target(text)


def test_a_target_is_refused_beside_a_quality_a_ladder_or_prores() -> None:
    assert target_choice(None, quality=None, prores=False, ladder=False) == ""
    assert target_choice("ssim=0.980", quality=None, prores=False, ladder=False) == "ssim=0.98"
    with pytest.raises(SpecError, match="give one of them"):
        target_choice("ssim=0.98", quality=20, prores=False, ladder=False)
    with pytest.raises(SpecError, match="ProRes"):
        target_choice("ssim=0.98", quality=None, prores=True, ladder=False)
    with pytest.raises(SpecError, match="--ladder"):
        target_choice("psnr=40", quality=None, prores=False, ladder=True)


def test_ffmpeg_51s_summaries_are_read() -> None:
    score = parse_score(FFMPEG_51, 24)
    assert (score.ssim, score.psnr_db, score.frames) == (0.996161, 45.749673, 24)
    assert score.fields() == {"ssim": 0.996161, "psnr_db": 45.75}


def test_identical_frames_score_a_finite_psnr() -> None:
    text = "PSNR y:inf u:inf v:inf average:inf min:inf max:inf\nSSIM Y:1.000000 (inf) U:1 " \
           "(inf) V:1 (inf) All:1.000000 (inf)"  # fmt: skip
    assert parse_score(text, 3).psnr_db == 100.0


def test_a_run_without_summaries_is_an_error() -> None:
    with pytest.raises(ValueError, match="no SSIM/PSNR"):
        parse_score("Conversion failed!", 24)


CUT = SegmentCut(first=240, end=480, total=960, rate=Fraction(24000, 1001), start_pts=1001,
                 seek_s=9.5)  # fmt: skip


def test_the_reference_is_cut_and_scaled_as_the_segment_and_read_in_a_masters_container() -> None:
    argv = score_argv(ffmpeg_bin="ffmpeg", segment=Path("/w/s.mp4"), source=Path("/m/m.mov"),
                      cut=CUT, width=640, height=360, pix_fmt="yuv420p10le")  # fmt: skip
    assert argv[argv.index("-i") - 4 : argv.index("-i") + 2] == [
        "-protocol_whitelist", "file", "-format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2", "-i",
        "file:/w/s.mp4",
    ]  # fmt: skip
    master_at = argv.index("file:/m/m.mov")
    assert argv[master_at - 4 : master_at] == ["-noaccurate_seek", "-ss", "9.500000", "-i"]
    assert "matroska,webm" in argv[argv.index("file:/w/s.mp4") + 4]
    graph = argv[argv.index("-filter_complex") + 1]
    assert graph == (
        "[0:v:0]format=yuv420p10le,settb=expr=1001/24000,setpts=N,split[m0][m1];"
        "[1:v:0]setpts=PTS-1001,fps=fps=24000/1001,trim=start_pts=240:end_pts=480,"
        "setpts=PTS-STARTPTS,scale=w=640:h=360:flags=lanczos,format=yuv420p10le,"
        "settb=expr=1001/24000,setpts=N,split[r0][r1];[m0][r0]ssim[ms];[m1][r1]psnr[mp]"
    )
    assert argv[-7:] == ["-map", "[ms]", "-map", "[mp]", "-f", "null", "-"]
    assert "-copyts" in argv and argv[argv.index("-loglevel") + 1] == "info"


def test_every_nth_frame_is_picked_alike_on_both_sides() -> None:
    argv = score_argv(ffmpeg_bin="ffmpeg", segment=Path("/w/s.mp4"), source=Path("/m/m.mov"),
                      cut=CUT, width=640, height=360, pix_fmt="yuv420p", every=4)  # fmt: skip
    graph = argv[argv.index("-filter_complex") + 1]
    assert graph.count(r"select=not(mod(n\,4))") == 2


def test_probes_are_a_few_short_windows_spread_over_a_long_chunk() -> None:
    windows = probe_cuts(CUT)
    assert [(w.first, w.end) for w in windows] == [(268, 292), (348, 372), (428, 452)]
    assert all(w.seek_s == CUT.seek_s and w.total == CUT.total for w in windows)


def test_a_short_chunk_is_probed_whole() -> None:
    short = SegmentCut(first=0, end=48, total=48, rate=Fraction(24), start_pts=0)
    assert probe_cuts(short) == [short]


def _search(curve: dict[int, float], target: Target, start: int = 20, top: int = 51) -> list[int]:
    tried: dict[int, float] = {}
    while (q := next_probe(tried, target, start, top)) is not None:
        tried[q] = curve[q]
    return list(tried)


def _falling(at_zero: float, per_step: float) -> dict[int, float]:
    return {q: at_zero - per_step * q for q in range(64)}


def test_the_search_steps_up_from_the_default_then_interpolates() -> None:
    curve = _falling(1.0, 0.001)  # ssim 0.98 at CRF 20, 0.97 at 30
    target = Target(metric="ssim", value=0.97)
    order = _search(curve, target)
    assert order[:2] == [20, 26] and len(order) <= MAX_PROBES
    assert chosen({q: curve[q] for q in order}, target) == (30, True)


def test_the_search_steps_down_when_the_default_misses() -> None:
    curve = _falling(60.0, 1.0)  # psnr 40 at CRF 20
    target = Target(metric="psnr", value=45.0)
    order = _search(curve, target)
    assert order[:2] == [20, 14]
    assert chosen({q: curve[q] for q in order}, target) == (15, True)


def test_an_unreachable_target_takes_the_best_value_probed_and_says_so() -> None:
    curve = _falling(0.9, 0.0)
    order = _search(curve, Target(metric="ssim", value=0.99))
    assert len(order) == MAX_PROBES
    assert chosen({q: curve[q] for q in order}, Target(metric="ssim", value=0.99)) == (
        min(order), False
    )  # fmt: skip


def test_the_search_stays_within_the_codecs_range() -> None:
    order = _search(_falling(1.0, 0.0), Target(metric="ssim", value=0.5), start=48, top=51)
    assert order == [48, 51]
    tried: dict[int, float] = {}
    while (q := next_probe(tried, Target(metric="psnr", value=99), 4, 51, bottom=1)) is not None:
        tried[q] = 30.0
    assert sorted(tried) == [1, 4]  # NVENC's CQ 0 means "the driver chooses": never probed


def test_status_shows_each_chunks_score_and_the_jobs_worst_and_mean() -> None:
    chunks = [{"ssim": "0.99", "psnr_db": "44.0"}, {"ssim": "0.97", "psnr_db": "40.0"}, {}]
    quality = job_quality(chunks)
    assert quality == {"ssim_worst": 0.97, "ssim_mean": 0.98, "psnr_worst_db": 40.0,
                       "psnr_mean_db": 42.0, "chunks_scored": 2}  # fmt: skip
    lines = quality_lines({"quality": quality, "spec": {"target_quality": "ssim=0.97"}})
    assert lines == [
        "quality SSIM worst 0.9700 mean 0.9800, PSNR worst 40.0 dB mean 42.0 dB over 2 "
        "segments; target ssim=0.97, each chunk's CRF/CQ chosen on probes"
    ]
    assert chunk_score_text({"ssim": 0.97, "psnr_db": 40.04, "quality": 27}) == (
        "0.9700 / 40.0 dB / 27"
    )  # fmt: skip
    assert job_quality([{}]) is None and quality_lines({"quality": None}) == []


def _transcode_record(chunks: list[dict[str, str]]) -> tuple[dict[str, str], list[dict[str, str]]]:
    spec = {"kind": "transcode", "source_name": "m.mov", "target_quality": "ssim=0.97"}
    job = {"id": "j-q", "kind": "transcode", "state": "done", "spec": json.dumps(spec),
           "chunks_total": "2", "chunks_done": "2"}  # fmt: skip
    return job, chunks


def test_status_and_the_job_page_show_the_scores_and_the_crfs_chosen() -> None:
    job, chunks = _transcode_record([
        {"index": "0", "state": "done", "frames": "[0, 1]", "ssim": "0.981", "psnr_db": "41.2",
         "quality": "27"},
        {"index": "1", "state": "done", "frames": "[2, 3]", "ssim": "0.975", "psnr_db": "39.5",
         "quality": "31"},
    ])  # fmt: skip
    summary = job_summary(job, chunks, now=2.0)
    assert [(c["ssim"], c["psnr_db"], c["quality"]) for c in summary["chunks"]] == [
        (0.981, 41.2, 27), (0.975, 39.5, 31)
    ]  # fmt: skip
    assert summary["quality"]["ssim_worst"] == 0.975
    text = to_text(status_table(summary))
    assert "0.9810 / 41.2 dB / 27" in text and "0.9750 / 39.5 dB / 31" in text
    assert "SSIM worst 0.9750 mean 0.9780" in text and "target ssim=0.97" in text
    page = job_page(summary, chunk_times={}, thumbs=[], logs={}, cost=None, now=2.0)
    assert '<td class="score">0.9750 / 39.5 dB / 31</td>' in page
    assert 'id="job-quality">quality: SSIM worst 0.9750, mean 0.9780' in page


def test_a_job_without_scores_shows_no_score_column() -> None:
    job, chunks = _transcode_record([{"index": "0", "state": "done", "frames": "[0, 1]"}])
    summary = job_summary(job, chunks, now=2.0)
    assert summary["quality"] is None and summary["chunks"][0]["ssim"] is None
    assert "ssim" not in to_text(status_table(summary))
    assert "score" not in job_page(summary, chunk_times={}, thumbs=[], logs={}, cost=None, now=2.0)


def test_the_stitch_joins_a_targets_segments_at_their_own_crfs_but_nothing_else_differing() -> None:
    from farm.core.errors import PermanentError
    from workers.phases.transcode_stitch import check_encoders

    aimed = {"name": "libx264", "preset": "medium", "target": "ssim=0.98"}
    check_encoders([aimed | {"quality": 23}, aimed | {"quality": 31}])
    with pytest.raises(PermanentError, match="different encoders or settings"):
        check_encoders([aimed | {"quality": 23}, aimed | {"quality": 23, "preset": "slow"}])
    with pytest.raises(PermanentError, match="different encoders or settings"):
        check_encoders([aimed | {"quality": 23}, aimed | {"quality": 31, "target": "psnr=40"}])
    plain = {"name": "libx264", "preset": "medium"}
    with pytest.raises(PermanentError, match="different encoders or settings"):
        check_encoders([plain | {"quality": 23}, plain | {"quality": 31}])


def _target_spec(target: str | None, quality: int | None = None) -> dict[str, object]:
    from farm.media.master import Probed
    from farm.media.transcode_spec import build_transcode_spec
    from tests.unit.test_scenecuts import _master

    spec = build_transcode_spec(
        source_name="m.mov", probed=Probed(info=_master(150), keyframes_pts=(0,)),
        resolution="320x180", codec="h264", encoder="software", preset="ultrafast",
        segment_frames=48, target_quality=target, quality=quality,
    )  # fmt: skip
    data: dict[str, object] = json.loads(json.dumps(spec.to_json()))
    return data


def test_the_submit_writes_the_target_back_and_the_api_takes_it_and_refuses_a_bad_one() -> None:
    from farm.web.api.answers import ApiError
    from farm.web.api.validate import job_spec

    sent = _target_spec("SSIM=0.980")
    assert sent["target_quality"] == "ssim=0.98"
    assert job_spec(sent, max_chunks=100).target_quality == "ssim=0.98"
    assert _target_spec(None)["target_quality"] == ""
    for bad, said in (("vmaf=19", "vmaf takes 20 to 99"), ("ssim=0.980", "write it as"),
                      ("psnr=400", "psnr takes")):  # fmt: skip
        with pytest.raises(ApiError, match=said):
            job_spec(sent | {"target_quality": bad}, max_chunks=100)
    with pytest.raises(ApiError, match="give one of them"):
        job_spec(sent | {"quality": 20}, max_chunks=100)
    with pytest.raises(SpecError, match="give one of them"):
        _target_spec("psnr=40", quality=20)
