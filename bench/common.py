"""What every benchmark shares: a local farm started the way users start it, the machine's
description, and the row type of the printed table.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control.credentials import admin_settings
from farm.control.processes import Farm
from farm.ledger import Ledger

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One line of the table: a measurement beside its baseline."""

    bench: str
    case: str
    farm: str
    baseline: str
    ratio: float | None = None
    note: str = ""


@dataclass(slots=True, kw_only=True)
class LocalFarm:
    """`farm up` on free loopback ports in a scratch directory; `close()` runs `farm down`."""

    base: Path
    workers: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.base / "config.json"

    @property
    def data(self) -> Path:
        return self.base / "data"

    def farm(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "farm", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
        if result.returncode != 0:
            raise RuntimeError(f"farm {' '.join(args)} -> {result.returncode}: {result.stderr}")
        return result

    def settings(self) -> Settings:
        """The admin's: a benchmark seeds and clears the ledger and the store beyond any role's
        rights (farm.core.roles)."""
        return admin_settings(self.data, self.config)

    def ledger(self) -> Ledger:
        return Ledger.from_url(self.settings().redis_url)

    def store(self) -> Store:
        return Store.from_settings(self.settings())

    def pids(self) -> dict[str, int]:
        """Each server's and worker's process, as `farm up` recorded them (name -> pid)."""
        return Farm.load(self.data).pids

    def close(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "farm", "down", "--data", str(self.data)],
            env=self.env,
            capture_output=True,
            timeout=180,
            cwd=ROOT,
        )


def start_farm(workers: int, threads: int = 1, base: Path | None = None) -> LocalFarm:
    """A local farm with `workers` one-thread workers and the benchmark tasks registered."""
    base = base or Path(tempfile.mkdtemp(prefix="farm-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env.update(
        FARM_CONFIG=str(base / "config.json"),
        # A setting, saved by `farm up` for its workers: Celery imports it as each one starts.
        FARM_WORKER_INCLUDE="bench.tasks",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
    )
    farm = LocalFarm(base=base, workers=workers, env=env)
    try:
        farm.farm(
            "up", "--data", str(farm.data), "--workers", str(workers), "--threads", str(threads)
        )
        _wait_for_workers(farm, workers)
    except BaseException:
        farm.close()
        raise
    return farm


def _wait_for_workers(farm: LocalFarm, workers: int, timeout_s: float = 120) -> None:
    ledger = farm.ledger()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(ledger.workers()) >= workers:
            return
        time.sleep(0.5)
    raise RuntimeError(f"only {len(ledger.workers())} of {workers} workers came up")


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return "missing"
    return out.splitlines()[0].strip() if out else "?"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 1,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        # The Blender the farm renders with (the bpy wheel), not whatever `blender` is on PATH.
        "blender": "bpy "
        + _version([sys.executable, "-c", "import bpy; print(bpy.app.version_string)"]),
        "ffmpeg": _version(["ffmpeg", "-version"]),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "disk_free_gib": round(shutil.disk_usage(tempfile.gettempdir()).free / 2**30, 1),
    }


def dump(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def scratch_redis(prefix: str) -> Iterator[str]:
    """A Redis of the bench's own on a free loopback port, keeping nothing on disk, its URL
    answering PING; stopped and its folder removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    port = free_port()
    server = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port",
         str(port), "--save", "", "--appendonly", "no", "--dir", str(work)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        ledger = Ledger.from_url(url)
        deadline = time.monotonic() + 60
        while True:
            try:
                ledger.ping()
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)
