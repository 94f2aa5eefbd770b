"""The scene's own settings are the job; flags override, and each value says where it came from."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from farm.blender.blendfile import read_scene
from farm.core.errors import SpecError
from farm.core.spec import JobSpec, build_render_spec, provenance, scene_resolution

BLENDS = Path(__file__).parent / "blends"
TEXTURED = Path(__file__).resolve().parents[2] / "scenes" / "textured.blend"


def _spec(scene_path: Path = TEXTURED, **flags: Any) -> JobSpec:
    values: dict[str, Any] = {
        "frames": None,
        "resolution": None,
        "fps": None,
        "samples": None,
        "engine": None,
        "camera": None,
    }
    values.update(flags)
    return build_render_spec(
        source_name=scene_path.name,
        chunk_size="auto",
        codec="h264",
        scene=read_scene(scene_path),
        **values,
    )


def test_no_flags_takes_everything_from_the_scene() -> None:
    spec = _spec()
    assert (spec.frames.first, spec.frames.last, spec.frames.count) == (11, 35, 25)
    assert str(spec.resolution) == "320x240"
    assert (spec.fps, spec.rate, spec.samples) == (25.0, 25, 4)
    assert (spec.engine, spec.camera, spec.overrides) == (None, None, ())
    shown = provenance(spec)
    assert shown.pop("scripts") == {"value": "not run", "from": "default"}
    assert {item["from"] for item in shown.values()} == {"scene"}
    assert shown["frames"]["value"] == "11-35"
    assert shown["camera"]["value"] == "ShotCam"
    assert shown["engine"]["value"] == "CYCLES"


def test_each_flag_overrides_only_its_setting_and_is_named() -> None:
    spec = _spec(frames="1-5", samples=16, camera="ShotCam", engine="eevee")
    assert spec.overrides == ("frames", "samples", "engine", "camera")
    assert (spec.frames.count, spec.samples, spec.engine, spec.camera) == (
        5,
        16,
        "BLENDER_EEVEE",
        "ShotCam",
    )
    assert str(spec.resolution) == "320x240"
    shown = provenance(spec)
    assert shown["samples"] == {"value": 16, "from": "flag"}
    assert shown["resolution"] == {"value": "320x240", "from": "scene"}
    assert shown["engine"] == {"value": "BLENDER_EEVEE", "from": "flag"}


def test_percentage_applies_and_odd_sizes_round_down_to_even_with_a_note() -> None:
    assert str(_spec(BLENDS / "cycles_2398.blend").resolution) == "960x540"
    scene = read_scene(BLENDS / "eevee_2997.blend")
    size, note = scene_resolution(scene)
    assert str(size) == "1000x562"
    assert note is not None and "1001x563" in note and "1000x562" in note


def test_fractional_scene_rate_stays_exact() -> None:
    spec = _spec(BLENDS / "cycles_2398.blend")
    assert spec.rate == Fraction(24000, 1001)
    assert provenance(spec)["fps"]["value"] == "24000/1001"
    assert (spec.frames.first, spec.frames.last, spec.frames.step) == (1001, 1048, 2)
    assert _spec(BLENDS / "cycles_2398.blend", fps=25.0).rate == 25


def test_scene_without_stored_samples_gets_cycles_default() -> None:
    scene = dataclasses.replace(read_scene(TEXTURED), samples=None)
    spec = build_render_spec(
        source_name="x.blend", frames=None, chunk_size=4, resolution=None, fps=None,
        samples=None, codec="h264", scene=scene,
    )  # fmt: skip
    assert spec.samples == 4096


def test_bad_engine_flag_is_refused() -> None:
    with pytest.raises(SpecError, match="--engine 'luxcore'"):
        _spec(engine="luxcore")


def test_spec_with_scene_round_trips_and_old_json_still_reads() -> None:
    spec = dataclasses.replace(_spec(samples=8), assets_key="jobs/j/assets.json")
    back = JobSpec.from_json(spec.to_json())
    assert back == spec
    old = spec.to_json()
    for name in ("scene", "engine", "camera", "overrides", "assets_key", "missing_assets"):
        old.pop(name)
    legacy = JobSpec.from_json(old)
    assert (legacy.scene, legacy.overrides, legacy.assets_key) == (None, (), None)
    assert provenance(legacy)["samples"] == {"value": 8, "from": "default"}


def test_camera_flag_must_name_a_camera_of_the_scene() -> None:
    with pytest.raises(SpecError, match=r"--camera 'Nope'.*ShotCam"):
        _spec(camera="Nope")
