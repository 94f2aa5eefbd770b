"""Edges of the CLI that a script meets: a health check with the broker down, a frames fetch
with no frames; each one line and an exit code, never a traceback or a false success."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from farm.adapters.store import Store
from farm.cli.main import cli
from farm.ledger import Ledger
from tests.integration.conftest import make_job

ROOT = Path(__file__).resolve().parents[2]


def test_the_worker_health_check_with_the_broker_down_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "FARM_CONFIG": str(tmp_path / "none.json"),
           "FARM_REDIS_URL": "redis://127.0.0.1:1/0", "FARM_S3_ENDPOINT": "http://127.0.0.1:2"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "farm", "worker", "--ping"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("farm: error: the broker does not answer")
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_fetching_the_frames_of_a_job_that_has_none_is_an_error(
    ledger: Ledger, redis_url: str, store: Store, tmp_path: Path
) -> None:
    """Found by a review: it printed a folder that was never made and exited 0."""
    make_job(ledger, "j1")
    ledger.cancel_job("j1")
    env = {"FARM_CONFIG": str(tmp_path / "none.json"), "FARM_REDIS_URL": redis_url,
           "FARM_S3_ENDPOINT": store.s3.meta.endpoint_url, "FARM_S3_BUCKET": store.bucket,
           "FARM_S3_ACCESS_KEY": "test-key", "FARM_S3_SECRET_KEY": "test-secret"}  # fmt: skip
    done = CliRunner().invoke(
        cli, ["fetch", "j1", str(tmp_path / "out") + "/", "--frames"], env=env, prog_name="farm"
    )
    assert done.exit_code == 1, done.output
    assert "farm: error: job j1 has no frames in the store" in done.output
    assert not (tmp_path / "out" / "j1-frames").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["scene.blend", "--quality", "18"], "--quality is for transcode jobs; scene.blend is a "
         "render job, which would ignore it: leave it out"),
        (["scene.blend", "--preset", "slow", "--segment-frames", "24"],
         "--preset, --segment-frames are for transcode jobs"),
        (["master.mov", "--samples", "64", "--camera", "Cam"],
         "--samples, --camera are for render jobs; master.mov is a transcode job"),
    ],
)  # fmt: skip
def test_a_flag_the_job_would_ignore_is_refused(
    tmp_path: Path, args: list[str], words: str
) -> None:
    """Found by a review: a render given --quality 18 quietly got the default."""
    done = CliRunner().invoke(
        cli, ["submit", *args], env={"FARM_CONFIG": str(tmp_path / "none.json")},
        prog_name="farm",
    )  # fmt: skip
    assert done.exit_code == 2, done.output
    assert words in done.output
