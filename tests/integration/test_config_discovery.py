"""What a user sees after `make demo`: the farm it left running answers the next command typed in
the same folder, with no FARM_CONFIG in the shell (README: a worked example)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from farm.adapters.settings import Settings, save_settings

FARM = Path(sys.executable).with_name("farm")


def _run_farm(args: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}  # a clean shell: no FARM_* at all
    return subprocess.run(
        [str(FARM), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_farm_jobs_in_the_demos_folder_reads_its_config(redis_url: str, tmp_path: Path) -> None:
    # GIVEN a config where `farm up --data .farm` (make demo) writes it, and an empty home
    checkout, home = tmp_path / "farm", tmp_path / "home"
    home.mkdir()
    save_settings(Settings(redis_url=redis_url), checkout / ".farm" / "config.json")
    # WHEN the user types `farm jobs` in that folder
    done = _run_farm(["jobs", "--json"], cwd=checkout, home=home)
    # THEN the farm answers
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("[")


def test_a_folder_below_it_does_not_borrow_its_config(redis_url: str, tmp_path: Path) -> None:
    checkout, home = tmp_path / "farm", tmp_path / "home"
    (checkout / "shots").mkdir(parents=True)
    home.mkdir()
    save_settings(Settings(redis_url=redis_url), checkout / ".farm" / "config.json")
    done = _run_farm(["jobs"], cwd=checkout / "shots", home=home)
    assert done.returncode == 1
    assert "no farm configured" in done.stderr
