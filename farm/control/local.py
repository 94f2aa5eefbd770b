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

import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from farm.adapters import cpus, proc, tls
from farm.adapters.private import private_dir
from farm.adapters.settings import Settings, load_settings, save_settings
from farm.adapters.store import Store
from farm.control.credentials import (
    HOST,
    farm_secrets,
    farm_settings,
    role_config,
    write_role_configs,
)
from farm.control.processes import (
    Farm,
    free_port,
    http_answers,
    port_free,
    wait_for,
)
from farm.control.stores import WEED_PORTS, start_redis, start_weed
from farm.core import roles
from farm.core.errors import ConfigError, FarmError, UnreachableError
from farm.core.roles import Role
from farm.ledger import Ledger

log = logging.getLogger(__name__)
_STORES = ("redis", "s3")
"""Started first, and answering before anything that needs them starts."""
_SERVICES = ("reconciler", "flower", "web")


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
    wanted = {"redis": ["redis"], "s3": ["weed." + n for n in WEED_PORTS]}
    for port_name in wanted.get(name, [name] if name in ("flower", "web") else []):
        if not port_free(port := farm.ports[port_name], reuse=True):
            raise ConfigError(
                f"the farm's {name} died, and port {port} ({port_name}), where its clients "
                "reach it, is now taken by another program: stop that program and run "
                "`farm up` again, or run `farm down`, then `farm up` (new ports)"
            )


def _assign_ports(farm: Farm) -> None:
    """Keep each server's port from the last run where it is still free; a new one elsewhere."""
    wanted = ["redis", "flower", "web", *("weed." + n for n in WEED_PORTS)]
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
        start_redis(farm, run.keys, run.tls_files)
    elif name == "s3":
        start_weed(farm, run.keys, https=run.tls_files is not None)
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
