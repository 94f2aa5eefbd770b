"""The worker's command line (`python -m workers`, what `farm worker` and `farm up` start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from farm.cli.main import cli
from workers.__main__ import main


def test_the_worker_command_takes_the_options_farm_passes_it() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for option in ("--queues", "--concurrency", "--name", "--threads", "--loglevel"):
        assert option in result.output


def test_a_bad_concurrency_is_a_usage_error() -> None:
    assert CliRunner().invoke(main, ["--concurrency", "0"]).exit_code == 2


def test_every_option_reaches_the_function() -> None:
    import inspect

    ctx = main.make_context("python -m workers", ["--queues", "render,stitch", "--threads", "2"])
    assert set(ctx.params) == set(inspect.signature(main.callback).parameters)
    assert ctx.params["queue_spec"] == "render,stitch"


def test_farm_worker_execs_the_worker_with_its_options_and_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"redis_url": "redis://127.0.0.1:1/0"}')
    execs: list[tuple[str, list[str], dict[str, str]]] = []

    def execve(path: str, argv: list[str], env: dict[str, str]) -> Any:
        execs.append((path, argv, env))

    monkeypatch.setattr("os.execve", execve)
    args = ["--config", str(config), "worker", "--queues", "render", "--threads", "2"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    [(_, argv, env)] = execs
    assert argv[1:3] == ["-m", "workers"] and env["FARM_CONFIG"] == str(config)
    # What it passes is what `python -m workers` takes: the same options, the same values.
    ctx = main.make_context("python -m workers", argv[3:])
    assert ctx.params["queue_spec"] == "render" and ctx.params["threads"] == 2
    assert ctx.params["cpus"] == "" and ctx.params["name"].startswith("farm@")
