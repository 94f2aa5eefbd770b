"""`farm up` / `farm down` as a careful admin would want: a data dir named `it's a dir` works, a
newline in it is refused cleanly, every secret and the Redis data are its owner's only, the Flower
password is not printed, and `farm down` leaves alone a process that merely has a stale pid."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.adapters import proc
from tests.conftest import LocalFarm, require_tools

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def quoted_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalFarm, str]]:
    """A farm whose data dir is `it's a "dir"` (one worker); with what `farm up` printed."""
    require_tools()
    base = tmp_path_factory.mktemp("up")
    config = base / "config.json"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FARM_")},
        "FARM_CONFIG": str(config),
    }
    farm = LocalFarm(data=base / 'it\'s a "dir"', config=config, env=env)
    up = farm.farm("up", "--data", str(farm.data), "--workers", "1", timeout=240)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{farm.logs()}"
    try:
        yield farm, up.stdout + up.stderr
    finally:
        farm.down()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_data_dir_with_a_quote_and_spaces_runs_a_farm(
    quoted_farm: tuple[LocalFarm, str],
) -> None:
    farm, _ = quoted_farm
    farm.ledger().ping()
    store = farm.store()
    store.put_bytes("probe/ok.txt", b"ok")
    assert store.get_bytes("probe/ok.txt") == b"ok"
    assert farm.farm("jobs").returncode == 0


def test_secrets_and_redis_data_are_the_owners_only(quoted_farm: tuple[LocalFarm, str]) -> None:
    farm, _ = quoted_farm
    assert mode(farm.data) == 0o700
    for secret in (farm.data / "secrets.json", farm.config, farm.data / "redis/redis.conf",
                   farm.data / "s3/identities.json"):  # fmt: skip
        assert mode(secret) == 0o600, secret
    redis_files = [p for p in (farm.data / "redis").rglob("*") if p.is_file()]
    assert any("appendonly" in p.name or p.suffix in (".aof", ".manifest") for p in redis_files)
    for path in redis_files:
        assert mode(path) & 0o077 == 0, f"{path} is {oct(mode(path))}"


def test_farm_up_does_not_print_the_flower_password(quoted_farm: tuple[LocalFarm, str]) -> None:
    farm, printed = quoted_farm
    password = json.loads(farm.config.read_text())["flower_password"]
    assert password not in printed
    assert "flower_password" in printed and str(farm.config) in printed


def test_farm_down_leaves_a_process_that_reused_a_stale_pid_alone(
    quoted_farm: tuple[LocalFarm, str],
) -> None:
    """GIVEN farm-up.json names a pid that now belongs to another process (its start time
    differs), WHEN `farm down` runs, THEN that process is not signalled."""
    farm, _ = quoted_farm
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        state_file = farm.data / "farm-up.json"
        state = json.loads(state_file.read_text())
        started = proc.start_time(bystander.pid)
        assert started is not None
        state["pids"]["ghost"] = bystander.pid
        state["starts"]["ghost"] = started - 100  # the farm's process of that pid died long ago
        state_file.write_text(json.dumps(state))
        farm.farm("down", "--data", str(farm.data), check=True, timeout=120)
        assert bystander.poll() is None, "farm down killed a process it did not start"
        assert not farm.farm("up", "--help").returncode
    finally:
        bystander.kill()
        bystander.wait()


def test_a_newline_in_the_data_dir_is_refused_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "FARM_CONFIG": str(tmp_path / "c.json")}
    done = subprocess.run(
        [sys.executable, "-m", "farm", "up", "--data", str(tmp_path / "a\nrequirepass x")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "newline" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "a\nrequirepass x").exists()
