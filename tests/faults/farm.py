"""A local farm whose workers and reconciler reach the store and Redis through fault proxies.

`farm up` starts Redis, the store, Flower and the job pages as ever, and no workers. The workers
are started here with FARM_S3_ENDPOINT and FARM_REDIS_URL aimed at the proxies (the environment
over the role's config file, as for any farm process: no setting of the product's own), and the
reconciler `farm up` started is replaced by one whose Redis is behind the same proxy: cutting
Redis cuts the workers, their Celery broker and the control plane together. The tests' own reads
(LocalFarm.ledger, .store) and the CLI stay direct, so a test sees the farm while a fault lasts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from farm.adapters.settings import Settings, load_settings
from tests.conftest import ROOT, LocalFarm, start_farm
from tests.e2e.farmtools import spawn_worker, wait_for
from tests.faults.proxy import HttpFaultProxy, TcpFaultProxy


@dataclass
class ProxiedFarm:
    farm: LocalFarm
    store: HttpFaultProxy
    """Between the workers (the reconciler too) and the store."""
    redis: TcpFaultProxy
    """Between the workers and the reconciler and Redis (ledger and Celery broker)."""

    def injected(self) -> dict[str, int]:
        """What both proxies injected so far, by kind."""
        return {**self.store.injected(), **self.redis.injected()}

    def quiet(self) -> None:
        """No fault from now on, and the counts start again."""
        self.store.clear()
        self.redis.restore()
        self.store.forget()
        self.redis.forget()

    def down(self) -> None:
        try:
            self.farm.down()
        finally:
            self.store.close()
            self.redis.close()


def _role(farm: LocalFarm, role: str) -> Settings:
    return load_settings(env={}, config_path=farm.data / "roles" / f"{role}.json")


def _target(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        raise ValueError(f"{url.split('@')[-1]} names no host and port to put a proxy before")
    return parts.hostname, parts.port


def start_proxied_farm(base: Path, workers: int = 2) -> ProxiedFarm:
    """A plain (no TLS) farm with `workers` workers and a reconciler behind the proxies."""
    # A held request costs its client a read timeout (then it sends it again): 10 s, not the
    # product's 60, keeps the timeout test short; loopback answers come well within it.
    farm = start_farm(base, workers=0, extra_env={"FARM_S3_READ_TIMEOUT_S": "10"})
    worker, control = _role(farm, "worker"), _role(farm, "control")
    store = HttpFaultProxy(_target(worker.s3_endpoint)).start()
    redis = TcpFaultProxy(_target(worker.redis_url)).start()
    proxied = ProxiedFarm(farm=farm, store=store, redis=redis)
    try:
        _replace_reconciler(farm, {
            "FARM_S3_ENDPOINT": store.url, "FARM_REDIS_URL": redis.url_for(control.redis_url)
        })  # fmt: skip
        for i in range(workers):
            spawn_worker(farm, f"proxied{i + 1}@test", FARM_S3_ENDPOINT=store.url,
                         FARM_REDIS_URL=redis.url_for(worker.redis_url))  # fmt: skip
        wait_for(f"{workers} proxied workers", lambda: _registered(farm) >= workers, 120, farm)
    except BaseException:
        proxied.down()
        raise
    return proxied


def _registered(farm: LocalFarm) -> int:
    return sum(1 for name in farm.ledger().workers() if name.startswith("proxied"))


def _replace_reconciler(farm: LocalFarm, through: dict[str, str]) -> None:
    """Stop the reconciler `farm up` started (its process group, by the pid farm-up.json keeps)
    and start one with `through` over the control role's settings; LocalFarm.down stops it."""
    pid = int(json.loads((farm.data / "farm-up.json").read_text())["pids"]["reconciler"])
    os.killpg(pid, signal.SIGTERM)
    wait_for("the first reconciler to stop", lambda: not _alive(pid), 60, farm)
    log = (farm.data / "logs" / "reconciler-proxied.log").open("ab")
    farm.extra_workers.append(subprocess.Popen(
        [sys.executable, "-m", "farm", "reconcile"], env={**farm.role_env("control"), **through},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
    ))  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie until it is reaped: gone all the same
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
