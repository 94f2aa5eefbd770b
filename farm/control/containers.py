"""`farm up --containers` / `farm down`: docker-compose.yml's farm run as containers on this
machine, through podman-compose or `docker compose`.

It writes the same config file as `farm up` (addresses on 127.0.0.1, where compose publishes each
port; the CLI's role), so every other command works unchanged; the secrets are the same data dir's
secrets.json, handed to compose in an owner-only env file, from which compose gives each service
only its role's credentials (docker-compose.yml, farm.core.roles). Run again, compose brings back missing services and
workers up to N. On a machine without an NVIDIA GPU, infra/containers/cpu.yml lifts the worker's
GPU reservation and it renders on the CPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from farm.adapters import engine as engines
from farm.adapters import weedsec
from farm.adapters.private import private_dir, write_private
from farm.adapters.settings import Settings, save_settings
from farm.adapters.store import Store
from farm.control import images
from farm.control.credentials import farm_secrets, farm_settings
from farm.control.processes import (
    Farm,
    enough,
    free_port,
    http_answers,
    port_free,
    wait_for,
)
from farm.core import roles
from farm.core.errors import ConfigError, ContainerError, FarmError
from farm.core.roles import Role
from farm.ledger import Ledger

COMPOSE_FILE = engines.ROOT / "docker-compose.yml"
CPU_FILE = engines.ROOT / "infra/containers/cpu.yml"
SERVICES = ("redis", "s3-security", "s3", "reconciler", "flower", "web")
PORTS = {"redis": 6379, "s3": 8333, "flower": 5555, "web": 8090}
"""Each published service and its port inside the container."""
CARRIED = (
    "shutdown_grace_s", "lease_s", "reconcile_interval_s", "max_lost_leases",
    "render_memory_limit_mb", "file_output_frame_max_bytes", "file_output_job_max_bytes",
    "log_max_bytes",
)  # fmt: skip
"""Settings of this host's that the containers take on (docker-compose.yml's x-farm-env names
each, with the farm's default)."""
PASSED = (
    "FARM_IMAGE", "FARM_REDIS_IMAGE", "FARM_SEAWEEDFS_IMAGE", "FARM_TMP_SIZE",
    "FARM_WORKER_TMP_SIZE",
)  # fmt: skip
"""docker-compose.yml's own variables, passed on from this shell where set (compose would read
them from the environment; `farm up --containers` hands it the env file alone)."""


@dataclass(slots=True, kw_only=True)
class ContainerFarm:
    """What `farm up --containers` started, kept in DATA/containers.json for `farm down`."""

    data: Path
    project: str = ""
    files: list[str] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    engine: str = ""

    @property
    def state_file(self) -> Path:
        return self.data / "containers.json"

    @property
    def env_file(self) -> Path:
        return self.data / "containers.env"

    def save(self) -> None:
        state = {k: v for k, v in asdict(self).items() if k != "data"}
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, data: Path) -> ContainerFarm:
        path = data / "containers.json"
        return cls(data=data, **json.loads(path.read_text())) if path.exists() else cls(data=data)

    def compose(self, engine: engines.Engine, *args: str) -> list[str]:
        argv = [*engine.compose_argv, "--project-name", self.project]
        argv += ["--env-file", str(self.env_file)]
        for path in self.files:
            argv += ["-f", path]
        return [*argv, *args]

    def container(self, service: str, number: int = 1) -> str:
        """The name compose gives a service's container (podman-compose and Docker alike)."""
        sep = "_" if self.engine == "podman" else "-"
        return f"{self.project}{sep}{service}{sep}{number}"


def project_name(data: Path) -> str:
    """One compose project per data dir, so two farms on one machine never meet."""
    return "farm-" + hashlib.sha256(str(data).encode()).hexdigest()[:10]


def up(
    data: Path,
    workers: int,
    config_path: Path,
    base: Settings,
    *,
    use_tls: bool = False,
    build: bool = True,
    say: Callable[[str], None] = print,
) -> tuple[Settings, ContainerFarm]:
    """Start (or complete) the container farm in `data`; returns its settings and state."""
    if use_tls:
        raise ConfigError(
            "--tls with --containers is not built yet: the containers would serve plain text; "
            "run `farm up --tls` (processes) for a TLS farm"
        )
    data = data.resolve()
    private_dir(data)
    if Farm.load(data).running():
        raise ConfigError(
            f"a process farm runs in {data}: `farm down` first, or use another --data"
        )
    engine = engines.find()
    built = images.build(engine, say=say) if build else []
    farm = ContainerFarm.load(data)
    farm.data, farm.engine = data, engine.name
    farm.project = farm.project or project_name(data)
    farm.files = [str(COMPOSE_FILE)] + ([] if engines.nvidia_gpu() else [str(CPU_FILE)])
    was_up = bool(running(farm, engine))
    _assign_ports(farm, keep=was_up)
    keys = farm_secrets(data)
    write_private(farm.env_file, _env_file(farm, keys, base))
    farm.save()
    log_path = data / "logs/compose.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # A rebuilt image keeps its tag, so compose would keep the containers of the old one.
    fresh = ["--force-recreate"] if was_up and any(b.changed for b in built) else []
    argv = farm.compose(engine, "up", "-d", *fresh, "--scale", f"worker={workers}", *SERVICES)
    argv += ["worker"] if workers else []
    try:
        engine.stream(
            argv, what=f"{engine.name} compose up", log_path=log_path, on_line=lambda _: None
        )
        _security_step_done(farm, engine)
        settings = farm_settings(base, data, farm.ports, keys)  # the CLI's role
        admin = farm_settings(base, data, farm.ports, keys, role=Role.ADMIN)
        ledger = Ledger.from_url(admin.redis_url)
        wait_for("Redis", ledger.ping, 60, log_path)
        wait_for("the S3 server", Store.from_settings(admin).ensure_bucket, 120, log_path)
        for name, url in (("Flower", settings.flower_url), ("farm web", settings.web_url)):
            wait_for(name, lambda u=url: http_answers(u, ""), 90, log_path)
        names = worker_names(farm, engine)
        wait_for(
            f"{workers} worker containers",
            lambda: enough(len(names & set(ledger.workers(max_age_s=20))), workers),
            180,
            log_path,
        )
    except FarmError:
        with contextlib.suppress(FarmError):  # the error that stopped `up` is the one to show
            down(data)  # nothing left half-started
        raise
    save_settings(settings, config_path)
    return settings, farm


def _security_step_done(farm: ContainerFarm, engine: engines.Engine) -> None:
    """The one-shot `s3-security` step exited 0: podman-compose starts SeaweedFS after it
    whatever its exit code (the image refuses to start without its file, this says why)."""
    step = farm.container("s3-security")
    state = engine.inspect(step).get("State", {})
    code = state.get("ExitCode") if isinstance(state, dict) else None
    if code != 0:
        logs = engine.capture("logs", "--tail", "8", step)
        raise ContainerError(
            f"the store's security step ({step}) exited {code}, so SeaweedFS would run without "
            f"its certificates and JWTs:\n  {(logs.stdout + logs.stderr).strip()}"
        )


def worker_names(farm: ContainerFarm, engine: engines.Engine) -> set[str]:
    """The Celery names of the project's running worker containers (farm@HOSTNAME)."""
    names = set()
    for container in containers_of(farm, engine, service="worker", every=False):
        config = engine.inspect(container).get("Config", {})
        if isinstance(config, dict):
            names.add(f"farm@{config.get('Hostname', '')}")
    return names


def down(data: Path, *, volumes: bool = False) -> list[str]:
    """Stop and remove the container farm's containers; its volumes (the data) stay unless
    `volumes`."""
    farm = ContainerFarm.load(data.resolve())
    if not farm.project:
        return []
    engine = engines.find(farm.engine)
    names = running(farm, engine)
    # Workers first, each by name (compose knows only the first of a scaled service): SIGTERM
    # and their stop timeout, so a worker mid-chunk hands the chunk back. Then compose, in
    # its dependency order, the rest.
    workers = containers_of(farm, engine, service="worker")
    if workers:
        engine.check("stop", *workers, timeout_s=300)
        engine.check("rm", "--force", *workers)
    engine.stream(
        farm.compose(engine, "down", *(["--volumes"] if volumes else [])),
        what=f"{engine.name} compose down",
        log_path=farm.data / "logs/compose.log",
        on_line=lambda _: None,
    )
    # `farm down` and `farm up` in this data dir are the process farm's again.
    farm.state_file.unlink(missing_ok=True)
    farm.env_file.unlink(missing_ok=True)
    if volumes:  # podman-compose leaves the volumes it made implicitly: each by its name
        listed = engine.check("volume", "ls", "--format", "{{.Name}}").split()
        ours = [v for v in listed if v.startswith(farm.project + "_")]
        if ours:
            engine.check("volume", "rm", "--force", *ours)
    return names


def running(farm: ContainerFarm, engine: engines.Engine) -> list[str]:
    """The names of the project's running containers."""
    return containers_of(farm, engine, every=False)


def containers_of(
    farm: ContainerFarm, engine: engines.Engine, *, service: str = "", every: bool = True
) -> list[str]:
    """The names of the project's containers (of one compose `service`), running or (`every`)
    not, by the labels compose gives them."""
    labels = [f"label=com.docker.compose.project={farm.project}"]
    labels += [f"label=com.docker.compose.service={service}"] if service else []
    filters = [arg for label in labels for arg in ("--filter", label)]
    out = engine.check("ps", *(["-a"] if every else []), *filters, "--format", "{{.Names}}")
    return sorted(line for line in out.split() if line)


def _assign_ports(farm: ContainerFarm, *, keep: bool) -> None:
    """Keep each published port from the last run where this project's containers hold it
    (`keep`) or it is free; a free one elsewhere."""
    for name in PORTS:
        port = farm.ports.get(name)
        if port is None or not (keep or port_free(port)):
            port = free_port()
            while port in farm.ports.values():
                port = free_port()
        farm.ports[name] = port


_ROLE_SECRETS = [n for r in Role for n in (roles.redis_password_name(r), *roles.s3_key_names(r))]
"""Each role's Redis password and store keys in secrets.json."""


def _variable(secret: str) -> str:
    """compose's variable for a secrets.json entry: `redis_password_worker` is
    FARM_REDIS_PASSWORD_WORKER."""
    return f"FARM_{secret.upper()}"


def _number(value: float) -> str:
    """A setting's number as compose passes it on: 30 not 30.0, 2147483648 not 2.14748e+09."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _env_file(farm: ContainerFarm, keys: dict[str, str], base: Settings) -> str:
    """docker-compose.yml's variables: compose reads them on this host to fill in each service's
    own environment, so a container holds only what its service names (its role's credentials,
    farm.core.roles), never this file."""
    values = {
        **{_variable(n): keys[n] for n in _ROLE_SECRETS},
        # One key signs the store's JWTs in compose (`farm store-security`).
        "FARM_WEED_JWT_KEY": keys[weedsec.JWT_SECRETS[0]],
        "FARM_FLOWER_USER": keys["flower_user"],
        "FARM_FLOWER_PASSWORD": keys["flower_password"],
        "FARM_WEBHOOK_SECRET": base.webhook_secret or keys["webhook_secret"],
        "FARM_NOTIFY_URL": base.notify_url,
        "FARM_WEBHOOK_ALLOW": base.webhook_allow,
        **{f"FARM_{name.upper()}": _number(getattr(base, name)) for name in CARRIED},
        "FARM_IMDS_URL": "off",  # no instance metadata service off EC2: no spot watcher to run
        **{f"FARM_{name.upper()}_PORT": str(port) for name, port in farm.ports.items()},
        **{name: os.environ[name] for name in PASSED if os.environ.get(name)},
    }
    for name, value in values.items():
        if re.search(r"[\s'\"$\\#]", value):
            raise ConfigError(f"{name} has a character compose's env file cannot hold: {value!r}")
    return "".join(f"{name}={value}\n" for name, value in values.items())
