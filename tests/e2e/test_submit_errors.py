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
