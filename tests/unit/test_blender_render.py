"""The render script's pure helpers (the script itself runs inside Blender; see
tests/integration/test_blender_render.py)."""

import pytest

from workers.blender_render import ChunkFailed, job_path, map_engine, safe_slot

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
        ("/etc/cron.d/x_", "etc_cron.d_x"),
        ("../../escape_", "escape"),
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
