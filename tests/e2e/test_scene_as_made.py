"""A scene rendered as its artist made it: its own frames, size, rate and samples with no render
flags, its texture and linked library carried to the worker, a missing texture refused at submit."""

from __future__ import annotations

import json
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from farm.core import keys
from tests.conftest import ROOT, LocalFarm, ffprobe

TEXTURED = ROOT / "scenes" / "textured.blend"
ORANGE, TEAL, MAGENTA = (240, 120, 20), (20, 150, 150), (255, 0, 255)


def _pixels(video: Path, frame: int, width: int, height: int) -> list[tuple[int, int, int]]:
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(video), "-vf", f"select=eq(n\\,{frame})",
         "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert len(raw) == width * height * 3
    return [(raw[i], raw[i + 1], raw[i + 2]) for i in range(0, len(raw), 3)]


def _near(pixels: list[tuple[int, int, int]], rgb: tuple[int, int, int], tol: int = 40) -> float:
    """Share of pixels within `tol` of `rgb` on every channel (h264's 4:2:0 blurs edges)."""
    hits = sum(1 for p in pixels if all(abs(a - b) <= tol for a, b in zip(p, rgb, strict=True)))
    return hits / len(pixels)


@pytest.mark.e2e
def test_textured_scene_renders_with_its_own_settings_and_files(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    result = local_farm.farm(
        "submit", str(TEXTURED), "--chunk-size", "5", "--wait", "--json", timeout=900
    )
    assert result.returncode == 0, result.stderr + local_farm.logs()
    summary = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    assert (summary["frames_total"], local_farm.planned_chunks(summary["id"])) == (25, 5)
    settings = summary["settings"]
    assert settings.pop("scripts") == {"value": "not run", "from": "default"}
    assert {name: item["from"] for name, item in settings.items()} == dict.fromkeys(
        settings, "scene"
    )
    assert (settings["frames"]["value"], settings["resolution"]["value"]) == ("11-35", "320x240")
    assert (settings["samples"]["value"], settings["camera"]["value"]) == (4, "ShotCam")

    job_id = summary["id"]
    records = local_farm.ledger().frame_records(job_id)  # each frame's writer: its claim
    assert sorted(records) == list(range(11, 36))
    stored = set(local_farm.store().keys(f"jobs/{job_id}/frames/"))
    assert {keys.frame_key(job_id, f, r.writer) for f, r in records.items()} <= stored
    manifest = local_farm.store().get_json(f"jobs/{job_id}/assets.json")
    assert [a["path"] for a in manifest["assets"]] == ["lib/prop.blend", "tex/checker.png"]

    fetched = local_farm.farm("fetch", job_id, str(tmp_path), check=True)
    video = Path(fetched.stdout.strip().splitlines()[0])
    stream = ffprobe(video)["streams"][0]
    assert int(stream["nb_read_frames"]) == 25
    assert (stream["width"], stream["height"]) == (320, 240)
    assert Fraction(stream["r_frame_rate"]) == 25

    pixels = _pixels(video, 12, 320, 240)
    assert _near(pixels, ORANGE) > 0.15, "the texture's orange squares are not in the frame"
    assert _near(pixels, TEAL) > 0.15, "the texture's teal squares are not in the frame"
    assert _near(pixels, MAGENTA, tol=60) < 0.001, "magenta: Blender rendered a missing texture"

    status = json.loads(local_farm.farm("status", job_id, "--json", check=True).stdout)
    assert status["settings"]["fps"] == {"value": "25", "from": "scene"}
    assert "ShotCam" in local_farm.farm("status", job_id, check=True).stdout


@pytest.mark.e2e
def test_missing_texture_is_refused_at_submit_naming_it(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    shot = tmp_path / "shot"
    shutil.copytree(ROOT / "scenes", shot, ignore=shutil.ignore_patterns("demo.blend"))
    (shot / "tex" / "checker.png").unlink()
    before = local_farm.farm("jobs", "--json", check=True).stdout
    result = local_farm.farm("submit", str(shot / "textured.blend"), "--json")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "//tex/checker.png" in result.stderr and "missing" in result.stderr
    assert local_farm.farm("jobs", "--json", check=True).stdout == before  # nothing queued


@pytest.mark.e2e
def test_truncated_scene_is_refused_at_submit(local_farm: LocalFarm, tmp_path: Path) -> None:
    cut = tmp_path / "cut.blend"
    data = TEXTURED.read_bytes()
    cut.write_bytes(data[: len(data) - 100])
    result = local_farm.farm("submit", str(cut))
    assert result.returncode == 2, result.stderr
    assert "cut.blend" in result.stderr and "truncated" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
def test_allow_missing_goes_on_and_records_the_missing_files(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    shot = tmp_path / "shot"
    shutil.copytree(ROOT / "scenes", shot, ignore=shutil.ignore_patterns("demo.blend"))
    (shot / "tex" / "checker.png").unlink()
    result = local_farm.farm("submit", str(shot / "textured.blend"), "--allow-missing", "--json")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    local_farm.farm("cancel", reply["id"])
    assert len(reply["assets"]["missing"]) == 1
    assert reply["assets"]["missing"][0].startswith("//tex/checker.png")
    status = json.loads(local_farm.farm("status", reply["id"], "--json", check=True).stdout)
    assert status["spec"]["missing_assets"] == reply["assets"]["missing"]
