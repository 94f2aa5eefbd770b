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


def test_farm_up_in_the_demos_folder_finds_the_demos_farm(redis_url: str, tmp_path: Path) -> None:
    """`farm up` with no --data starts (or finds) the farm its config names, as `farm down`
    does: in the demo's folder that is the demo's farm, never a second farm whose addresses and
    passwords would be written over the demo's config."""
    import json

    from farm.adapters import proc

    # GIVEN the demo's farm up in ./.farm (one process of it, alive) and its config beside it
    checkout, home = tmp_path / "farm", tmp_path / "home"
    data = checkout / ".farm"
    data.mkdir(parents=True)
    home.mkdir()
    save_settings(Settings(redis_url=redis_url, data_dir=str(data)), data / "config.json")
    alive = subprocess.Popen(["sleep", "120"])
    try:
        state = {"ports": {}, "pids": {"redis": alive.pid},
                 "starts": {"redis": proc.start_time(alive.pid)}}  # fmt: skip
        (data / "farm-up.json").write_text(json.dumps(state))
        # WHEN the user types `farm up` in that folder
        done = _run_farm(["up"], cwd=checkout, home=home)
    finally:
        alive.kill()
        alive.wait()
        elsewhere = home / ".local" / "share" / "farm"
        if (elsewhere / "farm-up.json").exists():  # the bug: a second farm, started; stop it
            _run_farm(["down", "--data", str(elsewhere)], cwd=checkout, home=home)
    # THEN it is the demo's farm, already up, and the config is the demo's still
    assert done.returncode == 0, done.stderr
    assert f"farm is already up without TLS (data in {data})" in done.stdout
    assert not (home / ".local" / "share" / "farm").exists()
