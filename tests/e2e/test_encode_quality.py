"""A transcode's segments scored against its master on the local farm (`farm status`, `--json`,
the manifests), and `--target-quality` choosing each chunk's CRF on probes: a busy chunk and a
flat one get different CRFs, and the joined video keeps every frame."""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from farm.media.quality import Score, parse_score, score_argv
from farm.media.transcode_graph import SegmentCut
from tests.conftest import LocalFarm
from tests.e2e.encode_media import FFMPEG

pytestmark = pytest.mark.e2e

SIZE = "320x180"


def _busy_then_flat(path: Path, audio: bool = False) -> Path:
    """48 frames at 24 fps: 24 of a moving test pattern with noise, then 24 of a plain colour;
    with `audio`, a tone beside them (the stitch then joins with ffmpeg's concat demuxer)."""
    tone = ["-f", "lavfi", "-i", "sine=f=440:r=48000:d=2"] if audio else []
    argv = [*FFMPEG, "-f", "lavfi", "-i", f"testsrc2=s={SIZE}:r=24,noise=alls=30:allf=t",
            "-f", "lavfi", "-i", f"color=c=0x3050a0:s={SIZE}:r=24", *tone,
            "-filter_complex", "[0:v]trim=end_frame=24,setpts=PTS-STARTPTS[a];"
            "[1:v]trim=end_frame=24,setpts=PTS-STARTPTS[b];[a][b]concat=n=2:v=1[v]",
            "-map", "[v]", "-c:v", "libx264", "-preset", "ultrafast", "-qp", "4",
            "-pix_fmt", "yuv420p"]  # fmt: skip
    if audio:
        argv += ["-map", "2:a", "-c:a", "aac"]
    subprocess.run([*argv, str(path)], check=True)
    return path


def _whole_score(master: Path, video: Path) -> Score:
    """The delivered video against the whole master, as a segment is scored."""
    whole = SegmentCut(first=0, end=48, total=48, rate=Fraction(24), start_pts=0)
    argv = score_argv(ffmpeg_bin="ffmpeg", segment=video, source=master, cut=whole, width=320,
                      height=180, pix_fmt="yuv420p")  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return parse_score(done.stderr, 48)


def _submit(local_farm: LocalFarm, master: Path, *flags: str) -> dict[str, Any]:
    result = local_farm.farm(
        "submit", str(master), "--segment-frames", "24", "--no-scene-cuts", "--resolution", SIZE,
        "--preset", "ultrafast", *flags, "--wait", "--json",
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stderr}\n{local_farm.logs()}"
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    return summary


def _manifests(local_farm: LocalFarm, job_id: str) -> list[dict[str, Any]]:
    store = local_farm.store()
    found = [store.get_json(k) for k in store.keys(f"jobs/{job_id}/manifests/")]
    return sorted(found, key=lambda m: m["chunk"])


def test_each_segments_score_shows_in_status_and_its_manifest(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a master of a busy half and a flat half, transcoded in two segments
    summary = _submit(local_farm, _busy_then_flat(tmp_path / "m.mov"))
    job_id = summary["id"]
    # WHEN its status is asked for as JSON
    shown = json.loads(local_farm.farm("status", job_id, "--json", check=True).stdout)
    # THEN every chunk has its SSIM and PSNR, the job its worst and mean, and no chosen CRF
    chunks = shown["chunks"]
    assert len(chunks) == 2
    assert all(0.5 < c["ssim"] <= 1 and 15 < c["psnr_db"] <= 100 for c in chunks), chunks
    assert all(c["quality"] is None for c in chunks)
    assert shown["quality"]["ssim_worst"] == min(c["ssim"] for c in chunks)
    assert shown["quality"]["chunks_scored"] == 2
    # ... the flat half scores better than the noisy one at the same CRF
    assert chunks[1]["ssim"] > chunks[0]["ssim"]
    # ... each manifest records the score of the segment it names
    manifests = _manifests(local_farm, job_id)
    assert [m["quality"]["ssim"] for m in manifests] == [c["ssim"] for c in chunks]
    assert all(m["quality"]["frames_scored"] == 24 for m in manifests)
    # ... and `farm status` shows them
    text = local_farm.farm("status", job_id, check=True).stdout
    assert "quality SSIM worst" in text and f"{chunks[0]['ssim']:.4f} / " in text, text


def test_score_none_skips_the_scoring_pass_of_segments_and_renditions(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN the same master, transcoded once plainly and once as a two-rung ladder, --score none
    master = _busy_then_flat(tmp_path / "m.mov")
    plain = _submit(local_farm, master, "--score", "none")
    made = local_farm.farm("submit", str(master), "--segment-frames", "24", "--no-scene-cuts",
                           "--preset", "ultrafast", "--score", "none",
                           "--ladder", "320x180@400k,160x90@150k", "--wait", "--json")  # fmt: skip
    assert made.returncode == 0, f"{made.stderr}\n{local_farm.logs()}"
    ladder = json.loads(made.stdout)
    for summary in (plain, ladder):
        job_id = summary["id"]
        # THEN it is done with no score anywhere: chunks, job, manifests, renditions, status
        assert summary["spec"]["score"] == "none"
        assert all(c["ssim"] is None and not c["rungs"] for c in summary["chunks"])
        assert summary["quality"] is None
        manifests = _manifests(local_farm, job_id)
        assert len(manifests) == 2 and not any("quality" in m for m in manifests)
        assert not any("quality" in r for m in manifests for r in m.get("renditions", ()))
        chunks = [local_farm.ledger().chunk(job_id, n) for n in range(2)]
        assert not any("score_s" in c or "ssim" in c for c in chunks), chunks
        text = local_farm.farm("status", job_id, check=True).stdout
        assert "quality SSIM" not in text and "ssim / psnr" not in text, text
    # AND the ladder's renditions were still made and joined: one decode, two encodes
    assert len(ladder["spec"]["ladder"]) == 2 and ladder["state"] == "done"


def test_target_quality_chooses_each_chunks_crf_and_the_video_is_whole(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN the same kind of master with a tone, transcoded to a target SSIM
    master = _busy_then_flat(tmp_path / "t.mov", audio=True)
    summary = _submit(local_farm, master, "--target-quality", "ssim=0.97")
    job_id = summary["id"]
    shown = json.loads(local_farm.farm("status", job_id, "--json", check=True).stdout)
    # THEN each chunk records the CRF its probes chose, within x264's range, and met the target
    crfs = [c["quality"] for c in shown["chunks"]]
    assert all(isinstance(q, int) and 0 <= q <= 51 for q in crfs), crfs
    assert crfs[1] > crfs[0], crfs  # the flat half takes a higher CRF for the same SSIM
    manifests = _manifests(local_farm, job_id)
    assert [m["encoder"]["quality"] for m in manifests] == crfs
    assert all(m["encoder"]["target"] == "ssim=0.97" for m in manifests)
    assert all(m["quality"]["target_met"] for m in manifests), manifests
    assert all(str(q) in m["quality"]["probes"] for q, m in zip(crfs, manifests, strict=True))
    assert all(c["ssim"] >= 0.965 for c in shown["chunks"]), shown["chunks"]
    assert shown["spec"]["target_quality"] == "ssim=0.97"
    # ... and the joined video (segments at two CRFs, joined by copy) keeps all 48 frames
    out = tmp_path / "out.mp4"
    local_farm.farm("fetch", job_id, str(out), check=True)
    counted = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
         "stream=nb_read_frames", "-of", "csv=p=0", str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert counted.stdout.strip() == "48"  # decoded, every frame
    # ... and decodes as the segments were scored (a parameter set taken from the wrong
    # segment would decode the others wrongly, without an error)
    assert _whole_score(master, out).ssim >= 0.96
    text = local_farm.farm("status", job_id, check=True).stdout
    assert "target ssim=0.97" in text, text
