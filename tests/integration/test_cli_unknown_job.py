"""A mistyped job id is bad input: every command that takes one says so and exits 2, as for a
missing file, against a real ledger (README: exit codes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from farm.cli.main import cli
from farm.ledger import Ledger

COMMANDS = [
    ["status", "j-nonesuch"],
    ["status", "j-nonesuch", "--wait"],
    ["fetch", "j-nonesuch", "out"],
    ["cancel", "j-nonesuch"],
    ["retry", "j-nonesuch"],
    ["logs", "j-nonesuch"],
    ["pause", "j-nonesuch"],
    ["resume", "j-nonesuch"],
    ["priority", "j-nonesuch", "10"],
    ["watch", "j-nonesuch"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[::2]))
def test_an_unknown_job_is_bad_input_exit_2(
    args: list[str], ledger: Ledger, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"FARM_REDIS_URL": redis_url, "FARM_CONFIG": str(tmp_path / "none.json")}
    done = CliRunner().invoke(cli, args, env=env, prog_name="farm")
    assert not (tmp_path / "out").exists()  # nothing written for a job that is not there
    assert done.exit_code == 2, done.output
    assert "farm: error: no job j-nonesuch; `farm jobs` lists the jobs" in done.output
    assert ledger.job("j-nonesuch") == {}  # nothing made in its name
