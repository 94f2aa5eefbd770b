"""VMAF beside SSIM and PSNR, pure where it can be: the scorer's argv and libvmaf's line, the
`vmaf=` target and `--score vmaf`, the VMAF ffmpeg setting and its probe (a fake binary), and
what status, the job page and the metrics show of it."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from farm.adapters.settings import Settings, load_settings
from farm.adapters.vmaf import IMAGEIO, find_vmaf, vmaf_binary
from farm.control.census import Census, add_chunk
from farm.core.errors import PermanentError, SpecError
from farm.core.report import job_summary, status_table, to_text
from farm.media.quality import (
    Target,
    next_probe,
    parse_score,
    parse_target,
    score_argv,
    score_choice,
    wants_vmaf,
)
from farm.web.exporter import families
from farm.web.jobpage import job_page
from tests.unit.test_quality import CUT, FFMPEG_51, _transcode_record
from workers.host.gpu import Capabilities, vmaf_works
from workers.phases.scoring import vmaf_ffmpeg

# What imageio-ffmpeg's ffmpeg 9.0.2 printed scoring a CRF 40 segment (this host).
FFMPEG_9 = """\
[Parsed_libvmaf_10 @ 0x7f7d54006a40] VMAF score: 70.044486
[Parsed_psnr_9 @ 0x7f7d54006480] PSNR y:30.019877 u:31.945003 v:30.580550 average:30.381357 min:29.911177 max:31.212203
[Parsed_ssim_8 @ 0x7f7d54005ec0] SSIM Y:0.916184 (10.766741) U:0.945854 (12.664326) V:0.961666 (14.164164) All:0.928709 (11.469680)
"""


def test_vmaf_is_a_third_sink_taking_the_segment_first_and_the_reference_second() -> None:
    argv = score_argv(ffmpeg_bin="/opt/ff", segment=Path("/w/s.mp4"), source=Path("/m/m.mov"),
                      cut=CUT, width=640, height=360, pix_fmt="yuv420p", vmaf_threads=4)  # fmt: skip
    graph = argv[argv.index("-filter_complex") + 1]
    assert graph.startswith(
        "[0:v:0]format=yuv420p,settb=expr=1001/24000,setpts=N,split=3[m0][m1][m2];"
    )
    assert ",settb=expr=1001/24000,setpts=N,split=3[r0][r1][r2];" in graph
    # libvmaf's input 0 is "main" (distorted), input 1 "reference": [m] is the segment (input 0).
    assert graph.endswith(
        "[m0][r0]ssim[ms];[m1][r1]psnr[mp];[m2][r2]libvmaf=model=version=vmaf_v0.6.1:n_threads=4[mv]"
    )
    assert argv[0] == "/opt/ff"
    assert argv[-9:] == ["-map", "[ms]", "-map", "[mp]", "-map", "[mv]", "-f", "null", "-"]


@pytest.mark.parametrize(
    ("size", "model"),
    [((1920, 1080), "vmaf_v0.6.1"), ((640, 360), "vmaf_v0.6.1"), ((3840, 2160), "vmaf_4k_v0.6.1"),
     ((4096, 1716), "vmaf_4k_v0.6.1"), ((2560, 1440), "vmaf_v0.6.1")],
)  # fmt: skip
def test_a_4k_output_is_scored_by_the_4k_model(size: tuple[int, int], model: str) -> None:
    argv = score_argv(ffmpeg_bin="/opt/ff", segment=Path("/w/s.mp4"), source=Path("/m/m.mov"),
                      cut=CUT, width=size[0], height=size[1], pix_fmt="yuv420p", vmaf_threads=2)  # fmt: skip
    assert (
        f"libvmaf=model=version={model}:n_threads=2[mv]" in argv[argv.index("-filter_complex") + 1]
    )


def test_without_vmaf_the_graph_is_ssim_and_psnr_alone() -> None:
    argv = score_argv(ffmpeg_bin="ffmpeg", segment=Path("/w/s.mp4"), source=Path("/m/m.mov"),
                      cut=CUT, width=640, height=360, pix_fmt="yuv420p")  # fmt: skip
    assert "libvmaf" not in " ".join(argv) and "[mv]" not in argv


def test_libvmafs_line_is_read_beside_the_other_summaries() -> None:
    score = parse_score(FFMPEG_9, 48, vmaf=True)
    assert (score.ssim, score.psnr_db, score.vmaf) == (0.928709, 30.381357, 70.044486)
    assert score.fields() == {"ssim": 0.928709, "psnr_db": 30.381, "vmaf": 70.044,
                              "vmaf_model": "vmaf_v0.6.1"}  # fmt: skip
    assert score.value("vmaf") == 70.044486
    assert parse_score(FFMPEG_9, 48).vmaf is None  # not asked: not recorded


def test_a_run_asked_for_vmaf_without_its_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="no VMAF score"):
        parse_score(FFMPEG_51, 24, vmaf=True)


@pytest.mark.parametrize(
    ("text", "value"), [("vmaf=95", 95.0), ("VMAF=20", 20.0), ("vmaf=99", 99.0)]
)
def test_a_vmaf_target_takes_20_to_99(text: str, value: float) -> None:
    assert parse_target(text) == Target(metric="vmaf", value=value)


@pytest.mark.parametrize("text", ["vmaf=19.9", "vmaf=99.5", "vmaf=100"])
def test_a_vmaf_target_out_of_range_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="vmaf takes 20 to 99"):
        parse_target(text)


def test_the_search_steps_on_vmaf_scores_as_on_ssims() -> None:
    target = parse_target("vmaf=90")
    assert next_probe({}, target, 23, 51) == 23
    assert next_probe({23: 94.0}, target, 23, 51) == 29  # passed: a step up
    assert next_probe({23: 94.0, 29: 86.0}, target, 23, 51) == 26  # interpolated


def test_vmaf_is_scored_only_when_asked_and_where_the_farm_has_it() -> None:
    assert not wants_vmaf("ssim=0.98", "ssim") and not wants_vmaf(None, "ssim")
    assert wants_vmaf("vmaf=95", "ssim") and wants_vmaf("", "vmaf")
    assert score_choice(None, "ssim=0.98", ladder=False, missing="no libvmaf") == "ssim"
    assert score_choice(None, "vmaf=95", ladder=False, missing="") == "vmaf"
    with pytest.raises(SpecError, match=r"--target-quality vmaf=95: this farm has no VMAF.*"
                                        r"install imageio-ffmpeg"):  # fmt: skip
        score_choice(None, "vmaf=95", ladder=False, missing="VMAF is off here")
    with pytest.raises(SpecError, match="--score vmaf with --ladder"):
        score_choice("vmaf", "", ladder=True, missing="")


def test_score_none_skips_scoring_but_not_under_a_target() -> None:
    assert score_choice("none", None, ladder=True, missing="no libvmaf") == "none"
    with pytest.raises(SpecError, match=r"--score none with --target-quality ssim=0\.98: the"):
        score_choice("none", "ssim=0.98", ladder=False, missing="")
    with pytest.raises(SpecError, match="--score 'fast': choose one of ssim, vmaf, none"):
        score_choice("fast", None, ladder=False, missing="")


def test_the_vmaf_ffmpeg_setting_defaults_to_imageio_ffmpeg_and_off_turns_it_off(
    tmp_path: Path,
) -> None:
    none = tmp_path / "none.json"
    assert load_settings(env={}, config_path=none).vmaf_ffmpeg == IMAGEIO
    assert load_settings(env={"FARM_VMAF_FFMPEG": "off"}, config_path=none).vmaf_ffmpeg == ""
    assert Settings(vmaf_ffmpeg="").vmaf_ffmpeg == ""
    said = load_settings(env={"FARM_VMAF_FFMPEG": "/srv/ff/ffmpeg"}, config_path=none)
    assert said.vmaf_ffmpeg == "/srv/ff/ffmpeg"


def test_imageio_ffmpeg_resolves_to_its_own_binary_and_a_path_is_taken_as_is() -> None:
    found = Path(vmaf_binary(IMAGEIO))
    assert found.is_file() and "imageio_ffmpeg" in found.parts
    assert vmaf_binary("/srv/ff/ffmpeg") == "/srv/ff/ffmpeg"


def _fake_ffmpeg(tmp_path: Path, filters: str) -> str:
    path = tmp_path / "ffmpeg"
    path.write_text(f"#!/bin/sh\ncat <<'END'\nFilters:\n{filters}END\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_worker_whose_ffmpeg_lacks_libvmaf_says_so_in_its_caps(tmp_path: Path) -> None:
    fake = _fake_ffmpeg(tmp_path, " .. ssim  VV->V  Calculate the SSIM.\n"
                                  " .. vmafmotion V->V  Calculate the VMAF Motion score.\n")  # fmt: skip
    works, why = vmaf_works(fake)
    assert (works, why) == (False, f"{fake} has no libvmaf filter")
    assert vmaf_works("") == (False, "VMAF is off here (FARM_VMAF_FFMPEG=off)")
    caps = Capabilities(vmaf=works, vmaf_error=why).to_json()
    assert caps["vmaf"] is False and "no libvmaf" in str(caps["vmaf_error"])


def test_a_worker_whose_ffmpeg_lists_libvmaf_can_score_it(tmp_path: Path) -> None:
    fake = _fake_ffmpeg(
        tmp_path, " .. libvmaf  VV->V  Calculate the VMAF between two video streams.\n"
    )
    assert vmaf_works(fake) == (True, "")
    assert find_vmaf(fake).binary == fake


def test_the_real_imageio_ffmpeg_has_libvmaf() -> None:
    assert vmaf_works(IMAGEIO) == (True, "")


def test_a_chunk_asking_for_vmaf_on_a_worker_without_it_fails_naming_the_worker() -> None:
    caps = Capabilities(vmaf=False, vmaf_error="/usr/bin/ffmpeg has no libvmaf filter")
    attempt = SimpleNamespace(
        index=3, ctx=SimpleNamespace(caps=caps, name="gpu-7", settings=Settings())
    )
    with pytest.raises(PermanentError, match=r"segment 3 asks for VMAF and worker gpu-7 cannot "
                                             r"score it \(/usr/bin/ffmpeg has no libvmaf filter\): "
                                             r"install imageio-ffmpeg"):  # fmt: skip
        vmaf_ffmpeg(attempt)  # type: ignore[arg-type]


def _record() -> tuple[dict[str, str], list[dict[str, str]]]:
    job, chunks = _transcode_record([
        {"index": "0", "state": "done", "frames": "[0, 1]", "ssim": "0.981", "psnr_db": "41.2",
         "vmaf": "93.512", "vmaf_model": "vmaf_4k_v0.6.1", "quality": "27"},
        {"index": "1", "state": "done", "frames": "[2, 3]", "ssim": "0.975", "psnr_db": "39.5",
         "vmaf": "90.25", "vmaf_model": "vmaf_4k_v0.6.1", "quality": "31"},
    ])  # fmt: skip
    return job | {"spec": job["spec"].replace("ssim=0.97", "vmaf=90")}, chunks


def test_status_json_and_the_job_page_show_each_chunks_vmaf_and_the_jobs_worst_and_mean() -> None:
    summary = job_summary(*_record(), now=2.0)
    assert [c["vmaf"] for c in summary["chunks"]] == [93.512, 90.25]
    assert (summary["quality"]["vmaf_worst"], summary["quality"]["vmaf_mean"]) == (90.25, 91.881)
    text = to_text(status_table(summary))
    assert "vmaf" in text and "93.51" in text and "90.25" in text
    assert summary["quality"]["vmaf_model"] == "vmaf_4k_v0.6.1"
    line = "VMAF worst 90.25 mean 91.88 (vmaf_4k_v0.6.1) over 2 segments; target vmaf=90"
    assert line in " ".join(text.split())
    page = job_page(summary, chunk_times={}, thumbs=[], logs={}, cost=None, now=2.0)
    assert '<td class="vmaf">90.25</td>' in page and "<th>vmaf</th>" in page
    assert "VMAF worst 90.25, mean 91.88 (vmaf_4k_v0.6.1) over 2 segments" in page


def test_a_job_scored_without_vmaf_shows_no_vmaf() -> None:
    job, chunks = _record()
    for chunk in chunks:
        del chunk["vmaf"]
    summary = job_summary(job, chunks, now=2.0)
    assert "vmaf_worst" not in summary["quality"]
    assert "vmaf" not in to_text(status_table(summary)).replace("vmaf=90", "")
    page = job_page(summary, chunk_times={}, thumbs=[], logs={}, cost=None, now=2.0)
    assert 'class="vmaf"' not in page and "VMAF worst" not in page


def test_the_metrics_have_a_vmaf_histogram_by_encoder() -> None:
    census = Census()
    job = {"kind": "transcode", "state": "done"}
    for value in ("93.5", "88.0"):
        add_chunk(census, job, {"state": "done", "encoder": "libx264", "ssim": "0.98",
                                "psnr_db": "40", "vmaf": value})  # fmt: skip
    add_chunk(census, job, {"state": "done", "encoder": "libx264", "ssim": "0.98", "psnr_db": "40"})
    vmaf = next(f for f in families(census) if f.name == "farm_segment_vmaf")
    samples = {(s.name, s.labels.get("le")): s.value for s in vmaf.samples}
    assert samples[("farm_segment_vmaf_count", None)] == 2
    assert samples[("farm_segment_vmaf_bucket", "90.0")] == 1
    assert samples[("farm_segment_vmaf_sum", None)] == 181.5


def _vmaf_spec(target: str | None, score: str | None, missing: str) -> dict[str, object]:
    from farm.media.master import Probed
    from farm.media.transcode_spec import build_transcode_spec
    from tests.unit.test_scenecuts import _master

    spec = build_transcode_spec(
        source_name="m.mov", probed=Probed(info=_master(150), keyframes_pts=(0,)),
        resolution="320x180", codec="h264", encoder="software", preset="ultrafast",
        segment_frames=48, target_quality=target, score=score, vmaf_missing=missing,
        quality=None,
    )  # fmt: skip
    data: dict[str, object] = json.loads(json.dumps(spec.to_json()))
    return data


def test_the_submit_refuses_vmaf_where_the_farm_has_none_and_the_api_takes_it() -> None:
    from farm.web.api.answers import ApiError
    from farm.web.api.validate import job_spec

    with pytest.raises(SpecError, match=r"--score vmaf: this farm has no VMAF \(VMAF is off"):
        _vmaf_spec(None, "vmaf", "VMAF is off here (FARM_VMAF_FFMPEG=off)")
    sent = _vmaf_spec("VMAF=95", None, "")
    assert (sent["target_quality"], sent["score"]) == ("vmaf=95", "vmaf")
    taken = job_spec(sent, max_chunks=100)
    assert (taken.target_quality, taken.score) == ("vmaf=95", "vmaf")
    assert _vmaf_spec("ssim=0.98", None, "no libvmaf")["score"] == "ssim"
    assert job_spec(_vmaf_spec(None, "none", ""), max_chunks=100).score == "none"
    with pytest.raises(ApiError, match=r"score 'ssim': write it as the CLI does \('vmaf'"):
        job_spec({**sent, "score": "ssim"}, max_chunks=100)
