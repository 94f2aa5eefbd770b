"""The worker's command line (`python -m workers`, what `farm worker` and `farm up` start)."""

from __future__ import annotations

from click.testing import CliRunner

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
