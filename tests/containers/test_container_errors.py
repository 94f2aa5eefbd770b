"""`farm up --containers` when compose refuses: the engine's own words and exit 2, never a
traceback, and nothing left half-started."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.containers.conftest import podman, require_engine

pytestmark = pytest.mark.e2e


def test_a_compose_error_is_shown_in_the_engines_own_words(tmp_path: Path) -> None:
    require_engine()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "podman-compose"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'WARNING:podman_compose:Ignored redis condition check' >&2\n"
        "echo 'Error: cannot listen on the TCP port: listen tcp4 127.0.0.1:6379: "
        "bind: address already in use' >&2\n"
        "exit 125\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FARM_")},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FARM_CONFIG": str(tmp_path / "config.json"),
        "FARM_ENGINE": "podman",
    }
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "farm", "up", "--containers", "--data", str(data)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,  # builds the images first where nothing has (cached: seconds)
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "podman compose up failed" in done.stderr
    assert "address already in use" in done.stderr
    assert not (tmp_path / "config.json").exists()  # no config naming a farm that is not up
    project = json.loads((data / "containers.json").read_text())["project"]
    label = f"label=com.docker.compose.project={project}"
    assert podman("ps", "-a", "--filter", label, "--format", "{{.Names}}").stdout.split() == []
