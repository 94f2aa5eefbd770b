"""`farm up`, `down`, `worker`, `reconcile`, `flower`, `web` and `metrics publish`: the commands
that start or run the farm's own processes (registered on the `farm` group by farm.cli.main)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from farm.adapters.settings import Settings, command_settings
from farm.adapters.worker_flags import worker_options
from farm.core.errors import ConfigError, FarmError
from farm.ledger import Ledger

if TYPE_CHECKING:
    from farm.control.local import Outcome

log = logging.getLogger("farm")


@click.command()
@click.option(
    "--data",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the farm keeps its data (default: ~/.local/share/farm).",
)
@click.option("--workers", type=click.IntRange(0, 64), default=2, show_default=True)
@click.option(
    "--threads",
    type=click.IntRange(0, 1024),
    default=0,
    help="CPU threads per worker's Blender (0: all of the worker's CPUs).",
)
@click.option(
    "--pin/--no-pin",
    default=True,
    show_default=True,
    help="Give each worker its own CPUs (when there are at least as many as workers), so two "
    "Blenders never fight over the same cores.",
)
@click.option(
    "--tls",
    "use_tls",
    is_flag=True,
    help="Every connection over TLS, verified against a CA made for this farm at first start.",
)
@click.option(
    "--containers",
    is_flag=True,
    help="Run docker-compose.yml's farm as containers (podman or Docker), ports on 127.0.0.1; "
    "run again to bring back missing services and workers up to --workers.",
)
@click.pass_context
def up(
    ctx: click.Context,
    data: Path | None,
    workers: int,
    threads: int,
    pin: bool,
    use_tls: bool,
    containers: bool,
) -> None:
    """Start a whole farm on this machine (loopback only)."""
    from farm.adapters import cpus
    from farm.control import local

    if data is None:  # the farm its config names (as `farm down` finds it), else the default
        known = command_settings(ctx).data_dir
        home = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "farm"
        data = Path(known) if known else home
    if containers:
        _up_containers(ctx, data, workers, use_tls)
        return
    done = local.up(
        data,
        workers,
        ctx.meta["config_path"],
        command_settings(ctx),
        threads,
        use_tls=use_tls,
        pin=pin,
    )
    if not done.started:
        _up_already(ctx, data, done, workers, use_tls)
        return
    shares = local.worker_cpus(workers, pin)
    if shares:
        each = " | ".join(cpus.format_list(share) for share in shares)
        how_workers = f"{workers}, each on its own CPUs: {each}"
    else:
        how_workers = f"{workers}" + (", sharing every CPU" if workers else "")
    _summary(ctx, done.settings, how_workers)


def _up_already(ctx: click.Context, data: Path, done: Outcome, workers: int, use_tls: bool) -> None:
    """A farm that was up, whole or in part: what came back, and what the flags would change."""
    how = " with TLS" if done.tls else " without TLS"
    if done.brought_back:
        click.echo(f"brought back: {', '.join(done.brought_back)}")
        click.echo(f"  the rest kept running{how} (data in {data.resolve()})")
        if done.redis_empty:
            click.echo("  redis had no data to load (its data folder was emptied): it started "
                       "with an empty ledger")  # fmt: skip
    else:
        click.echo(f"farm is already up{how} (data in {data.resolve()}); `farm down` stops it")
    if use_tls != done.tls:
        click.echo(f"  to run it {'with' if use_tls else 'without'} TLS: `farm down`, then "
                   f"`farm up{' --tls' if use_tls else ''}`")  # fmt: skip
    given = ctx.get_parameter_source("workers") is click.core.ParameterSource.COMMANDLINE
    if given and workers != done.workers:
        runs = f"{done.workers} worker{'s' if done.workers != 1 else ''}"
        click.echo(f"  it runs {runs}; to run {workers}: `farm down`, then "
                   f"`farm up --workers {workers}`")  # fmt: skip


def _summary(ctx: click.Context, settings: Settings, how_workers: str) -> None:
    """What `farm up` prints, processes or containers alike."""
    click.echo(f"farm is up; data in {settings.data_dir}")
    where = settings.redis_url.split("@")[-1].split("?")[0]
    click.echo(f"  redis    {where} (password in the config file)")
    if settings.tls_cert_file:
        click.echo(f"  tls      every connection; the farm's CA is {settings.ca_file}")
    click.echo(f"  s3       {settings.s3_endpoint} bucket {settings.s3_bucket}")
    click.echo(f"  workers  {how_workers}")
    click.echo(
        f"  flower   {settings.flower_url}  user {settings.flower_user} "
        f"(password: flower_password in {ctx.meta['config_path']})"
    )
    click.echo(f"  jobs     {settings.web_url}/  (same user and password)")
    click.echo(f"  metrics  {settings.web_url}/metrics  (Prometheus)")
    click.echo(f"  config   {ctx.meta['config_path']}")


def _say(line: str) -> None:
    """Progress of a long step (an image build), on stderr beside the command's own output."""
    click.echo(line, err=True)


def _up_containers(ctx: click.Context, data: Path, workers: int, use_tls: bool) -> None:
    from farm.control import containers

    settings, farm = containers.up(
        data, workers, ctx.meta["config_path"], command_settings(ctx), use_tls=use_tls,
        say=_say,
    )  # fmt: skip
    gpu = "on the GPU" if len(farm.files) == 1 else "on the CPU (no NVIDIA GPU here)"
    _summary(ctx, settings, f"{workers} containers ({farm.engine}, project {farm.project}), {gpu}")


@click.command()
@click.option(
    "--base",
    default="auto",
    show_default=True,
    help="The base image: auto (a local debootstrap base, else Debian's from a registry, else "
    "one made by debootstrap), or any image with Debian 12's packages and Python 3.11.",
)
@click.option(
    "--refresh",
    is_flag=True,
    help="Make the base and every layer again (Debian's security updates; the layer cache never "
    "sees them).",
)
def image(base: str, refresh: bool) -> None:
    """Build the farm's images (farm-worker, farm-redis, farm-seaweedfs) from this checkout."""
    from farm.adapters import engine
    from farm.control import images

    for built in images.build(engine.find(), base=base, refresh=refresh, say=_say):
        click.echo(f"{built.ref}  {built.size_bytes / 1e6:,.0f} MB  built in {built.seconds:.1f} s")


@click.command()
@click.option("--data", type=click.Path(path_type=Path), default=None)
@click.pass_context
def down(ctx: click.Context, data: Path | None) -> None:
    """Stop everything `farm up` started."""
    from farm.control import local

    if data is None:
        data_dir = command_settings(ctx).data_dir
        data = Path(data_dir) if data_dir else None
    if data is not None and (data / "containers.json").exists():
        from farm.control import containers

        stopped = containers.down(data)
        click.echo(
            f"stopped and removed {len(stopped)} containers" if stopped else "farm was not running"
        )
        return
    if data is None or not (data / "farm-up.json").exists():
        click.echo("no local farm to stop")
        return
    stopped = local.down(data)
    click.echo(f"stopped {', '.join(stopped)}" if stopped else "farm was not running")


@click.command()
@worker_options
@click.option(
    "--ping", is_flag=True, help="Ask the running worker on this host to answer, then exit."
)
@click.pass_context
def worker(
    ctx: click.Context,
    queue_spec: str,
    concurrency: int,
    name: str,
    threads: int,
    cpus: str,
    ping: bool,
) -> None:
    """Run a worker on this host (inside the worker container on a GPU host)."""
    settings = command_settings(ctx).require_farm()
    if ping:
        from farm.dispatch import ping_worker

        # the container's health check: one line, never a traceback
        if not ping_worker(settings, name, timeout_s=5):
            raise FarmError(f"worker {name} did not answer a ping within 5 s")
        click.echo(f"{name}: pong")
        return
    argv = [sys.executable, "-m", "workers", "--queues", queue_spec, "--name", name]
    argv += ["--concurrency", str(concurrency), "--threads", str(threads), "--cpus", cpus]
    # The worker reads the same config as this command (`farm --config X worker`).
    env = {**os.environ, "FARM_CONFIG": str(ctx.meta["config_path"])}
    os.execve(sys.executable, argv, env)


@click.command()
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option(
    "--rebuild",
    is_flag=True,
    help="Put back every unfinished job the ledger lost, from the store, say what was found, "
    "then exit (the running reconciler does this by itself when it notices a loss).",
)
@click.option(
    "--interval-s", type=click.FloatRange(min=0.1), default=None, help="Seconds between passes."
)
@click.pass_context
def reconcile(ctx: click.Context, once: bool, rebuild: bool, interval_s: float | None) -> None:
    """Requeue chunks whose lease expired, open completion gates, release (or cancel) jobs that
    wait for others, abort the early uploads of jobs that failed or were cancelled, and rebuild a
    ledger that lost jobs from the store."""
    from farm.adapters.store import Store
    from farm.control.reconcile import Reconciler
    from farm.dispatch import Dispatcher, make_app

    logging.getLogger().setLevel(logging.INFO)
    settings = command_settings(ctx).require_farm()
    rec = Reconciler(
        Ledger.from_url(settings.redis_url),
        Dispatcher(make_app(settings)),
        max_lost_leases=settings.max_lost_leases,
        store=Store.from_settings(settings),
        early_upload_keep_s=settings.early_upload_keep_h * 3600,
    )
    if rebuild:
        for line in rec.rebuild(None).lines():
            click.echo(line)
        return
    if once:
        click.echo(str(rec.run_once()))
        return
    from farm.control.webhooks import Notifier, allowed_ranges

    notifier = Notifier(
        ledger=Ledger.from_url(settings.redis_url, ride_out_s=30),
        notify_url=settings.notify_url,
        secret=settings.webhook_secret,
        allow=allowed_ranges(settings.webhook_allow),
    )
    notifier.start()  # webhooks drain beside the loop, never inside it
    rec.run_forever(interval_s or settings.reconcile_interval_s)


@click.command()
@click.option("--address", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=5555, show_default=True)
@click.pass_context
def flower(ctx: click.Context, address: str, port: int) -> None:
    """Run Flower for this farm, every page, metrics and health check included, behind basic auth
    (FARM_FLOWER_USER / FARM_FLOWER_PASSWORD)."""
    import runpy

    from farm.web.flower import lock_routes

    settings = command_settings(ctx).require_farm()
    if not settings.flower_user or not settings.flower_password:
        raise FarmError("Flower needs credentials: set FARM_FLOWER_USER and FARM_FLOWER_PASSWORD")
    os.environ.update(
        CELERY_BROKER_URL=settings.redis_url,
        CELERY_RESULT_BACKEND=settings.redis_url,
        FLOWER_BASIC_AUTH=f"{settings.flower_user}:{settings.flower_password}",
    )
    argv = ["celery", "flower", f"--address={address}", f"--port={port}"]
    if settings.tls_cert_file:
        argv += [f"--certfile={settings.tls_cert_file}", f"--keyfile={settings.tls_key_file}"]
    lock_routes()  # in this process, so that Flower makes its app with the locked routes
    sys.argv = argv
    runpy.run_module("celery", run_name="__main__", alter_sys=True)  # `python -m celery flower`


@click.command("store-security", hidden=True)
@click.argument("home", type=click.Path(path_type=Path))
@click.pass_context
def store_security(ctx: click.Context, home: Path) -> None:
    """Write SeaweedFS's security.toml and the store's CA under HOME (docker-compose.yml's
    `s3-security` step): every SeaweedFS port but S3 then wants its client certificate, and the
    filer and volume their JWTs, signed with $FARM_WEED_JWT_KEY. With $FARM_STORE_IDENTITIES,
    also HOME/identities.json: an S3 identity per role, each with only its actions."""
    from farm.adapters import weedsec
    from farm.core.roles import parse_store_keys

    settings = command_settings(ctx)
    key = settings.weed_jwt_key
    if len(key) < 32:
        raise ConfigError(
            "set FARM_WEED_JWT_KEY to 32 or more random characters (openssl rand -hex 32)"
        )
    try:
        identities = parse_store_keys(settings.store_identities)
    except ValueError as exc:
        raise ConfigError(f"{exc} (FARM_STORE_IDENTITIES)") from None
    path = weedsec.write_home(home, home / "tls", dict.fromkeys(weedsec.JWT_SECRETS, key))
    click.echo(f"wrote {path}")
    if identities:  # SeaweedFS's S3 identities, one per role (docker-compose.yml's -s3.config)
        click.echo(f"wrote {weedsec.write_identities(home, identities, settings.s3_bucket)}")


@click.command()
@click.option("--address", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8090, show_default=True)
@click.pass_context
def web(ctx: click.Context, address: str, port: int) -> None:
    """Serve the API (/api/v1, /openapi.json), the job pages and the Prometheus metrics
    (/metrics), the pages behind Flower's credentials or an API token's login."""
    from farm.adapters.store import Store
    from farm.web.api import FarmAPI
    from farm.web.app import FarmWeb
    from farm.web.server import serve

    logging.getLogger().setLevel(logging.INFO)
    settings = command_settings(ctx).require_farm()
    if not settings.flower_user or not settings.flower_password:
        raise FarmError("farm web needs credentials: set FARM_FLOWER_USER and FARM_FLOWER_PASSWORD")
    app = FarmWeb(
        ledger=Ledger.from_url(settings.redis_url),
        store=Store.from_settings(settings),
        user=settings.flower_user,
        password=settings.flower_password,
        api=FarmAPI.from_settings(settings),
    )
    tls_files = (settings.tls_cert_file, settings.tls_key_file) if settings.tls_cert_file else None
    serve(app, address, port, tls_files)


@click.group()
def metrics() -> None:
    """Farm metrics for autoscaling."""


@metrics.command("publish")
@click.option("--once", is_flag=True, help="Publish once, then exit.")
@click.option("--interval-s", type=click.FloatRange(min=1.0), default=60.0, show_default=True)
@click.option("--namespace", default="Farm", show_default=True)
@click.option("--farm-name", default="farm", show_default=True)
@click.pass_context
def metrics_publish(
    ctx: click.Context, once: bool, interval_s: float, namespace: str, farm_name: str
) -> None:
    """Publish (queued + running) chunks per worker, per queue, to CloudWatch (BacklogPerWorker)."""
    from farm.adapters.metrics import BacklogPublisher, cloudwatch
    from farm.control import census

    logging.getLogger().setLevel(logging.INFO)
    settings = command_settings(ctx).require_farm()
    ledger = Ledger.from_url(settings.redis_url)
    publisher = BacklogPublisher(
        cloudwatch(settings.s3_region),
        namespace=namespace,
        farm_name=farm_name,
    )
    while True:
        # The same census the Prometheus exporter serves: backlog = queued + running chunks.
        counts = census.take(ledger)
        backlog, workers = dict(counts.backlog()), dict(counts.serving)
        try:
            publisher.publish_counts(backlog, workers)
            log.info("published backlog: chunks %s, workers %s", backlog, workers)
        except FarmError as exc:
            if once:
                raise
            log.warning("%s; will publish again", exc)
        if once:
            click.echo(json.dumps({"queued": dict(counts.waiting), "running": dict(counts.running),
                                   "backlog": backlog, "workers": workers}))  # fmt: skip
            return
        time.sleep(interval_s)


COMMANDS = (up, down, image, worker, reconcile, flower, store_security, web, metrics)
