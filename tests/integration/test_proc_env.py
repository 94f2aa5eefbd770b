"""Children run by farm.adapters.proc get a minimal environment, never the worker's farm secrets."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from farm.adapters import proc


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_REDIS_URL", "redis://:secret-pw@127.0.0.1:6379/0")
    monkeypatch.setenv("FARM_S3_SECRET_KEY", "s3-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")


@pytest.mark.usefixtures("worker_env")
def test_run_gives_a_child_no_farm_or_aws_variable() -> None:
    lines: list[str] = []
    result = proc.run(["env"], on_line=lines.append)
    assert result.ok
    names = {line.split("=", 1)[0] for line in lines}
    assert "PATH" in names and "LANG" in names
    assert not any(n.startswith(("FARM_", "AWS_")) for n in names)
    assert not any("secret" in line for line in lines)


@pytest.mark.usefixtures("worker_env")
def test_capture_and_daemons_get_the_same_minimal_environment(tmp_path: Path) -> None:
    out = proc.capture(["env"]).stdout
    assert "FARM_" not in out and "AWS_" not in out and "secret" not in out
    log = tmp_path / "env.log"
    pid = proc.spawn_daemon(["env"], log_path=log)
    while proc.alive(pid) and not log.read_text():
        time.sleep(0.05)
    time.sleep(0.2)
    assert "PATH=" in log.read_text() and "secret" not in log.read_text()


@pytest.mark.usefixtures("worker_env")
def test_an_explicit_environment_is_passed_as_given() -> None:
    out = proc.capture(["env"], env={"PATH": "/usr/bin:/bin", "FARM_CONFIG": "/c.json"}).stdout
    assert "FARM_CONFIG=/c.json" in out
