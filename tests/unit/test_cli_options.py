"""Options two commands share are defined once and read the same in both commands' help."""

from __future__ import annotations

import re

from click.testing import CliRunner

from farm.cli.main import cli


def option_help(command: str, flag: str) -> str:
    """`flag`'s entry in `farm COMMAND --help`, its lines joined."""
    shown = CliRunner().invoke(cli, [command, "--help"], terminal_width=100)
    assert shown.exit_code == 0, shown.output
    entry = re.search(rf"^  {flag} .*?(?=^  -|\Z)", shown.output, re.MULTILINE | re.DOTALL)
    assert entry, shown.output
    return " ".join(entry.group(0).split())


def test_allow_path_reads_the_same_on_submit_and_retry() -> None:
    """Found by a review: `--allow-path` was defined twice, and the two helps had drifted."""
    on_submit = option_help("submit", "--allow-path")
    assert on_submit == option_help("retry", "--allow-path")
    assert "FARM_ASSET_ALLOW_PATHS" in on_submit and "--scene" in on_submit
