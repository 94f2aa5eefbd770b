"""The render script's pure helpers (the script itself runs inside Blender; see
tests/integration/test_blender_render.py)."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from farm.blender.script import (
    MAX_OUTPUTS,
    ChunkFailed,
    frame_is_preview,
    job_path,
    list_outputs,
    map_engine,
    outputs_name,
    safe_slot,
    unique,
)

ENGINES_4_5 = ["BLENDER_EEVEE_NEXT", "BLENDER_WORKBENCH", "CYCLES"]
ENGINES_5_0 = ["BLENDER_EEVEE", "BLENDER_WORKBENCH", "CYCLES"]


def test_eevee_names_map_both_ways_between_releases() -> None:
    assert map_engine("BLENDER_EEVEE", ENGINES_4_5) == "BLENDER_EEVEE_NEXT"
    assert map_engine("BLENDER_EEVEE_NEXT", ENGINES_5_0) == "BLENDER_EEVEE"
    assert map_engine("CYCLES", ENGINES_4_5) == "CYCLES"


def test_an_engine_this_blender_lacks_fails_naming_what_it_has() -> None:
    with pytest.raises(ChunkFailed, match="OCTANE is not in this Blender"):
        map_engine("OCTANE", ENGINES_4_5)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/etc/cron.d/x_", "etc_cron.d_x_"),
        ("../../escape_", "escape_"),
        ("passes/beauty_", "passes_beauty_"),
        ("beauty.", "beauty."),
        ("_beauty", "_beauty"),
        ("..", "slot"),
        ("..\\..\\win", "win"),
        ("beauty_####", "beauty_####"),
        ("", "slot"),
    ],
)
def test_file_output_slot_paths_become_plain_names(path: str, name: str) -> None:
    assert safe_slot(path) == name


def test_job_path_comes_after_the_double_dash_inside_blender() -> None:
    assert job_path(["blender", "-b", "--python", "s.py", "--", "--job", "/j.json"]) == "/j.json"
    assert job_path(["s.py", "--job", "/j.json"]) == "/j.json"
    with pytest.raises(ChunkFailed):
        job_path(["s.py"])


def _scene(**changes: Any) -> SimpleNamespace:
    """A scene as bpy shows it to the script: PNG RGBA 8-bit, opaque film (Blender's defaults),
    with `changes` over them."""
    image = {"file_format": "PNG", "color_mode": "RGBA", "color_depth": "8",
             "color_management": "FOLLOW_SCENE"}  # fmt: skip
    render = {"film_transparent": False, "use_multiview": False}
    for key, value in changes.items():
        part = image if key in image else render
        assert key in part, key
        part[key] = value
    return SimpleNamespace(
        render=SimpleNamespace(**render, image_settings=SimpleNamespace(**image))
    )


@pytest.mark.parametrize(
    ("changes", "depth"),
    [
        ({}, "8"),  # RGBA, the film opaque: its alpha is then read back from the saved frame
        ({"color_mode": "RGB"}, "8"),
        ({"color_mode": "RGB", "film_transparent": True}, "8"),  # no alpha in the file at all
        ({"color_mode": "RGB", "color_depth": "16"}, "16"),  # a 10-bit video's preview
    ],
)
def test_a_frame_saved_as_the_preview_would_be_can_be_the_preview(
    changes: dict[str, Any], depth: str
) -> None:
    assert frame_is_preview(_scene(**changes), depth)


@pytest.mark.parametrize(
    ("changes", "depth"),
    [
        ({"file_format": "OPEN_EXR"}, "8"),
        ({"file_format": "JPEG", "color_mode": "RGB"}, "8"),
        ({"color_depth": "16"}, "8"),  # a 16-bit master, an 8-bit video
        ({"color_mode": "RGB"}, "16"),
        ({"color_mode": "BW"}, "8"),
        ({"color_management": "OVERRIDE"}, "8"),  # its own view transform, not the scene's
        ({"film_transparent": True}, "8"),  # alpha below 1: the preview is darker at edges
        ({"use_multiview": True}, "8"),
    ],
)
def test_a_frame_that_differs_from_the_preview_gets_its_own(
    changes: dict[str, Any], depth: str
) -> None:
    assert not frame_is_preview(_scene(**changes), depth)


def test_a_frames_file_output_files_are_listed_as_the_nodes_laid_them_out(
    tmp_path: Path,
) -> None:
    """GIVEN what File Output nodes wrote into a frame's folder (a node's folder of slots, a
    node's multilayer EXR) THEN they are announced relative to it; links are not."""
    (tmp_path / "Depth").mkdir()
    (tmp_path / "Depth" / "Image0007.png").write_bytes(b"d")
    (tmp_path / "Passes0007.exr").write_bytes(b"p")
    (tmp_path / "Link0007.png").symlink_to("/etc/passwd")
    (tmp_path / "Dir").symlink_to("/etc", target_is_directory=True)
    assert list_outputs(str(tmp_path), 7) == ["Depth/Image0007.png", "Passes0007.exr"]


def test_a_scene_without_file_output_nodes_has_no_outputs(tmp_path: Path) -> None:
    assert list_outputs(str(tmp_path / "none"), 1) == []


def test_each_run_and_frame_has_a_folder_of_its_own() -> None:
    """A killed run's leftovers, or a second chunk of the job beside it, never write into it."""
    assert outputs_name("a" * 32, 7) != outputs_name("b" * 32, 7) != outputs_name("b" * 32, 8)


def test_names_that_clash_once_plain_get_a_number() -> None:
    taken: set[str] = set()
    names = [unique(safe_slot(n), taken) for n in ("a b", "a_b", "A_B", "深度", "法線")]
    assert names == ["a_b", "a_b_2", "A_B_3", "深度", "法線"]


def test_more_file_outputs_than_a_frame_may_keep_fail_the_chunk(tmp_path: Path) -> None:
    for i in range(MAX_OUTPUTS + 1):
        (tmp_path / f"pass{i}_0001.png").write_bytes(b"x")
    with pytest.raises(ChunkFailed, match="more than"):
        list_outputs(str(tmp_path), 1)
