"""Bad input gets a clear message and exit 2, and nothing is queued or stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DEMO, LocalFarm

pytestmark = pytest.mark.e2e


def _snapshot(farm: LocalFarm) -> tuple[int, list[str]]:
    jobs = json.loads(farm.farm("jobs", "--json", check=True).stdout)
    return len(jobs), farm.store().keys("scenes/")


@pytest.mark.parametrize(
    ("make", "args", "words"),
    [
        (lambda d: d / "missing.blend", [], "no such file"),
        (
            lambda d: (d / "notes.txt", (d / "notes.txt").write_text("hi"))[0],
            [],
            "not a .blend file",
        ),
        (lambda d: DEMO, ["--frames", "50-10"], "ends before it starts"),
        (lambda d: DEMO, ["--frames", "1-10:0"], "step must be 1 or more"),
        (lambda d: DEMO, ["--chunk-size", "0"], "--chunk-size 0"),
        (lambda d: DEMO, ["--resolution", "321x180"], "odd side"),
    ],
    ids=["missing", "not-blend", "backwards-range", "zero-step", "zero-chunk", "odd-resolution"],
)
def test_bad_submit_is_refused_before_anything_is_queued(
    local_farm: LocalFarm, tmp_path: Path, make: object, args: list[str], words: str
) -> None:
    before = _snapshot(local_farm)
    path = make(tmp_path)  # type: ignore[operator]
    result = local_farm.farm("submit", str(path), *args)
    assert result.returncode == 2
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    assert _snapshot(local_farm) == before


def test_unreachable_farm_is_one_line_not_a_traceback(local_farm: LocalFarm) -> None:
    env = {**local_farm.env, "FARM_REDIS_URL": "redis://:x@127.0.0.1:1/0"}
    result = LocalFarm(data=local_farm.data, config=local_farm.config, env=env).farm(
        "submit", str(DEMO), "--frames", "1-2"
    )
    assert result.returncode == 1
    assert result.stderr.startswith("farm: error: Redis does not answer")
    assert len(result.stderr.strip().splitlines()) == 1
    # ... saying where the address came from and what to check
    assert f"is the farm up? (`farm up` starts a local one; its addresses come from " \
        f"{local_farm.config} and FARM_* variables)" in result.stderr  # fmt: skip


def test_a_config_file_that_is_not_there_is_named(local_farm: LocalFarm, tmp_path: Path) -> None:
    env = {**local_farm.env, "FARM_CONFIG": str(tmp_path / "typo.json")}
    result = LocalFarm(data=local_farm.data, config=tmp_path / "typo.json", env=env).farm("jobs")
    assert result.returncode == 1
    assert f"(the config file {tmp_path / 'typo.json'} does not exist)" in result.stderr


def test_a_truncated_scene_is_one_clear_line_without_the_readers_warnings(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    cut = tmp_path / "cut.blend"
    cut.write_bytes(DEMO.read_bytes()[:4000])
    result = local_farm.farm("submit", str(cut), "--frames", "1-2")
    assert result.returncode == 2
    assert result.stderr.startswith("farm: error: ") and "WARNING" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
