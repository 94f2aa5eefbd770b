"""The local farm's Blender is the worker image's release (4.5 LTS, the `bpy` wheel): scenes saved
by Blender 5.0 open, Eevee renders headless, denoising works, and EXR scenes keep EXR frames."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, LocalFarm, ffprobe

pytestmark = pytest.mark.e2e

SAVED_BY_5_0 = ROOT / "tests" / "integration" / "blends"
FIXTURES = ROOT / "tests" / "unit" / "blends"


def _render(farm: LocalFarm, scene: Path, *flags: str) -> dict[str, Any]:
    result = farm.farm("submit", str(scene), *flags, "--wait", "--json", timeout=600)
    assert result.returncode == 0, result.stderr + farm.logs()
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    return summary


def _video(farm: LocalFarm, job_id: str, dest: Path) -> dict[str, Any]:
    out = farm.farm("fetch", job_id, str(dest) + "/", check=True).stdout.strip().splitlines()[0]
    stream: dict[str, Any] = ffprobe(Path(out))["streams"][0]
    return stream


def test_a_scene_saved_by_blender_5_0_renders(local_farm: LocalFarm, tmp_path: Path) -> None:
    summary = _render(local_farm, SAVED_BY_5_0 / "cycles-5.0.blend")
    assert summary["settings"]["blender_version"] == {"value": "5.0", "from": "scene"}
    video = _video(local_farm, summary["id"], tmp_path)
    assert (int(video["nb_read_frames"]), video["width"], video["height"]) == (2, 32, 32)


def test_an_eevee_scene_renders_headless_with_its_engine_name_mapped(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    """Saved by 5.0 as BLENDER_EEVEE; 4.5 calls the engine BLENDER_EEVEE_NEXT."""
    summary = _render(local_farm, SAVED_BY_5_0 / "eevee-5.0.blend", "--samples", "1")
    assert summary["settings"]["engine"]["value"] == "BLENDER_EEVEE"
    assert int(_video(local_farm, summary["id"], tmp_path)["nb_read_frames"]) == 2


def test_a_denoised_exr_scene_keeps_exr_frames_and_makes_a_video(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    """GIVEN a Cycles scene with denoising on and multilayer EXR output at 23.976 fps WHEN it
    renders THEN `fetch --frames` gives the EXR frames and the video has the scene's rate."""
    summary = _render(
        local_farm, FIXTURES / "cycles_2398.blend",
        "--frames", "1001-1003:2", "--resolution", "160x90", "--samples", "2",
    )  # fmt: skip
    settings = summary["settings"]
    assert settings["denoising"] == {"value": True, "from": "scene"}
    assert settings["output"]["value"].startswith("OPEN_EXR_MULTILAYER")
    job_id = summary["id"]
    video = _video(local_farm, job_id, tmp_path)
    assert (int(video["nb_read_frames"]), Fraction(video["r_frame_rate"])) == (
        2,
        Fraction(24000, 1001),
    )
    local_farm.farm("fetch", job_id, str(tmp_path) + "/", "--frames", check=True)
    frames = sorted((tmp_path / f"{job_id}-frames").iterdir())
    # named by the scene's Output path (Blender's default `/tmp/`): the frame number, 4 digits
    assert [f.name for f in frames] == ["1001.exr", "1003.exr"]
    head = frames[0].read_bytes()[:4096]
    assert head[:4] == b"\x76\x2f\x31\x01"  # OpenEXR magic
    assert b"ViewLayer" in head or b"Beauty" in head  # multilayer: channels named by layer


def test_a_workbench_render_of_a_scene(local_farm: LocalFarm, tmp_path: Path) -> None:
    summary = _render(local_farm, SAVED_BY_5_0 / "eevee-5.0.blend", "--engine", "BLENDER_WORKBENCH")
    assert summary["settings"]["engine"] == {"value": "BLENDER_WORKBENCH", "from": "flag"}
    video = _video(local_farm, summary["id"], tmp_path)
    assert (int(video["nb_read_frames"]), video["width"], video["height"]) == (2, 32, 32)


def test_a_scene_without_a_camera_is_refused_at_submit(local_farm: LocalFarm) -> None:
    before = local_farm.farm("jobs", "--json", check=True).stdout
    result = local_farm.farm("submit", str(FIXTURES / "workbench.blend"))
    assert result.returncode == 2 and "no active camera" in result.stderr, result.stderr
    assert local_farm.farm("jobs", "--json", check=True).stdout == before
