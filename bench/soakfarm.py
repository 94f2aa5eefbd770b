"""The soak's farm: `farm up` with no workers (the tests' short leases), and workers started here,
each reaching Redis and the store through proxies of its own (tests/faults), so one worker can be
cut off alone, and the store through one shared HTTP fault proxy beside them, where store faults
are injected for every worker at once. The reconciler, the CLI and the soak's own reads stay
direct: they see the farm while a fault lasts.

    worker --TcpFaultProxy (its own)--> Redis
    worker --TcpFaultProxy (its own)--> HttpFaultProxy (shared) --> the store
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from farm.adapters.settings import load_settings
from farm.control.processes import Farm
from tests.conftest import LocalFarm, start_farm
from tests.e2e.farmtools import kill_group, spawn_worker, wait_for
from tests.faults.listener import HOST
from tests.faults.proxy import HttpFaultProxy, TcpFaultProxy

PREFIX = "soak"


@dataclass(eq=False, slots=True)
class Worker:
    """A worker process (its own process group: Blender goes with it) and its two proxies."""

    name: str
    process: subprocess.Popen[bytes]
    redis: TcpFaultProxy
    store: TcpFaultProxy

    def close(self) -> None:
        self.redis.close()
        self.store.close()


def _target(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        raise ValueError(f"{url.split('@')[-1]} names no host and port to put a proxy before")
    return parts.hostname, parts.port


@dataclass(slots=True)
class SoakFarm:
    farm: LocalFarm
    store: HttpFaultProxy
    """Before the store, for every worker: store faults are injected here."""
    workers: list[Worker] = field(default_factory=list)
    """The live ones (a killed worker leaves the list; its replacement joins it)."""
    started: int = 0

    @classmethod
    def start(cls, base: Path, workers: int, seed: int) -> SoakFarm:
        farm = start_farm(base, workers=0)
        role = load_settings(env={}, config_path=farm.data / "roles" / "worker.json")
        soak = cls(farm=farm, store=HttpFaultProxy(_target(role.s3_endpoint), seed=seed).start())
        try:
            for _ in range(workers):
                soak.spawn()
            wait_for(f"{workers} workers", lambda: soak.registered() >= workers, 300, farm)
        except BaseException:
            soak.down()
            raise
        return soak

    def spawn(self) -> Worker:
        """One more worker, with proxies of its own."""
        role = load_settings(env={}, config_path=self.farm.data / "roles" / "worker.json")
        redis = TcpFaultProxy(_target(role.redis_url)).start()
        store = TcpFaultProxy((HOST, self.store.port)).start()
        self.started += 1
        name = f"{PREFIX}{self.started}@bench"
        process = spawn_worker(self.farm, name, FARM_S3_ENDPOINT=f"http://{HOST}:{store.port}",
                               FARM_REDIS_URL=redis.url_for(role.redis_url))  # fmt: skip
        worker = Worker(name=name, process=process, redis=redis, store=store)
        self.workers.append(worker)
        return worker

    def registered(self) -> int:
        """Live workers of ours the ledger has heard from."""
        names = {w.name for w in self.workers}
        return sum(1 for name in self.farm.ledger().workers() if name in names)

    def kill(self, worker: Worker) -> Worker:
        """SIGKILL the worker's process group (Blender too); a new worker takes its place."""
        kill_group(worker.process)
        self.workers.remove(worker)
        worker.close()
        return self.spawn()

    def stop(self, worker: Worker) -> None:
        kill_group(worker.process, signal.SIGSTOP)

    def wake(self, worker: Worker) -> None:
        kill_group(worker.process, signal.SIGCONT)

    def partition(self, worker: Worker, for_s: float) -> int:
        """Every connection of the worker to Redis and the store cut, new ones refused, for
        `for_s`; how many connections were cut."""
        return worker.redis.cut(for_s) + worker.store.cut(for_s)

    def flush_redis(self) -> None:
        """Every key in Redis gone (ledger, broker queues, the mark), as the admin can."""
        self.farm.ledger().r.flushall()

    def restart_redis(self) -> None:
        """Redis killed, its data wiped, and `farm up` run again: it brings back just Redis."""
        pid = Farm.load(self.farm.data).pids["redis"]
        with suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        wait_for("Redis to die", lambda: not Farm.load(self.farm.data).ours("redis"), 60)
        shutil.rmtree(self.farm.data / "redis", ignore_errors=True)
        up = self.farm.farm("up", "--data", str(self.farm.data), "--workers", "0", timeout=600)
        if up.returncode != 0 or "brought back: redis" not in up.stdout.splitlines():
            raise RuntimeError(f"farm up did not bring Redis back:\n{up.stdout}\n{up.stderr}")

    def down(self) -> None:
        try:
            self.farm.down()
        finally:
            for worker in self.workers:
                worker.close()
            self.store.close()
