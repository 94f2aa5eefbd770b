"""The `farm` command line. The one place on the control plane that configures logging and turns
a FarmError into a plain message and an exit code (SpecError and usage errors: 2; others: 1)."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import click

from farm import keys
from farm.cli_control import COMMANDS as CONTROL_COMMANDS
from farm.cli_submit import settings_text, submit, wait_for_job
from farm.errors import ConfigError, FarmError, SpecError
from farm.ledger import Ledger
from farm.report import (
    jobs_table,
    status_table,
    to_text,
)
from farm.settings import Settings, default_config_path, load_settings
from farm.spec import JobSpec, check_scene_path, provenance
from farm.state import ENDED

log = logging.getLogger("farm")


class FarmGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FarmError as exc:
            if ctx.meta.get("debug"):
                raise
            click.echo(f"farm: error: {exc}", err=True)
            ctx.exit(2 if isinstance(exc, SpecError) else 1)


def _settings(ctx: click.Context) -> Settings:
    return load_settings(config_path=ctx.meta.get("config_path"))


@click.group(cls=FarmGroup)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Config file (default: $FARM_CONFIG or ~/.config/farm/config.json).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, config_path: Path | None) -> None:
    """farm: render Blender scenes and encode video on a farm of GPU workers."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not debug:  # urllib3 warns per retry of a refused certificate; the error says it once
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    ctx.meta["debug"] = debug
    ctx.meta["config_path"] = config_path or default_config_path(os.environ)


@cli.command()
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
@click.pass_context
def up(
    ctx: click.Context, data: Path | None, workers: int, threads: int, pin: bool, use_tls: bool
) -> None:
    """Start a whole farm on this machine (loopback only)."""
    from farm import cpus, local

    data = data or Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "farm"
    settings, started = local.up(
        data, workers, ctx.meta["config_path"], _settings(ctx), threads, use_tls=use_tls, pin=pin
    )
    if not started:
        running_tls = bool(settings.tls_cert_file)
        how = " with TLS" if running_tls else " without TLS"
        click.echo(f"farm is already up{how} (data in {data.resolve()}); `farm down` stops it")
        if use_tls != running_tls:
            click.echo(f"  to run it {'with' if use_tls else 'without'} TLS: `farm down`, then "
                       f"`farm up{' --tls' if use_tls else ''}`")  # fmt: skip
        return
    click.echo(f"farm is up; data in {settings.data_dir}")
    where = settings.redis_url.split("@")[-1].split("?")[0]
    click.echo(f"  redis    {where} (password in the config file)")
    if settings.tls_cert_file:
        click.echo(f"  tls      every connection; the farm's CA is {settings.ca_file}")
    click.echo(f"  s3       {settings.s3_endpoint} bucket {settings.s3_bucket}")
    shares = local.worker_cpus(workers, pin)
    if shares:
        each = " | ".join(cpus.format_list(share) for share in shares)
        click.echo(f"  workers  {workers}, each on its own CPUs: {each}")
    else:
        click.echo(f"  workers  {workers}" + (", sharing every CPU" if workers else ""))
    click.echo(
        f"  flower   {settings.flower_url}  user {settings.flower_user} "
        f"(password: flower_password in {ctx.meta['config_path']})"
    )
    click.echo(f"  jobs     {settings.web_url}/  (same user and password)")
    click.echo(f"  metrics  {settings.web_url}/metrics  (Prometheus)")
    click.echo(f"  config   {ctx.meta['config_path']}")


@cli.command()
@click.option("--data", type=click.Path(path_type=Path), default=None)
@click.pass_context
def down(ctx: click.Context, data: Path | None) -> None:
    """Stop everything `farm up` started."""
    from farm import local

    data = data or (Path(_settings(ctx).data_dir) if _settings(ctx).data_dir else None)
    if data is None or not (data / "farm-up.json").exists():
        click.echo("no local farm to stop")
        return
    stopped = local.down(data)
    click.echo(f"stopped {', '.join(stopped)}" if stopped else "farm was not running")


@cli.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@click.option("--wait", is_flag=True, help="Follow the job until it ends; exit 0 only if done.")
@click.pass_context
def status(ctx: click.Context, job_id: str, as_json: bool, wait: bool) -> None:
    """Show a job's state, its chunks, its cost and its output."""
    from farm.watch import summarize

    ledger = Ledger.from_url(_settings(ctx).require_farm().redis_url)
    job = ledger.job(job_id)
    if not job:
        raise FarmError(f"no job {job_id}; `farm jobs` lists the jobs")
    if wait:
        wait_for_job(_settings(ctx), job_id, quiet=as_json)
    summary = summarize(ledger, job_id)
    summary["settings"] = provenance(JobSpec.from_json(summary["spec"])) if summary["spec"] else {}
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(to_text(status_table(summary)))
    if summary["settings"]:
        click.echo(settings_text(summary["settings"]))
    for missing in summary["spec"].get("missing_assets", []):
        click.echo(f"  missing at submit (--allow-missing): {missing}")
    if wait:
        ctx.exit(0 if summary["state"] == "done" else 1)


@cli.command()
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def jobs(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List jobs, newest first."""
    ledger = Ledger.from_url(_settings(ctx).require_farm().redis_url)
    rows = []
    from farm.watch import summarize

    for job_id in ledger.job_ids(limit):
        summary = summarize(ledger, job_id, with_chunks=False)
        summary.pop("chunks")
        rows.append(summary)
    if as_json:
        click.echo(json.dumps(rows))
        return
    click.echo(to_text(jobs_table(rows)))


@cli.command()
@click.argument("job_id")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--frames", "with_frames", is_flag=True, help="Download the rendered frames too.")
@click.pass_context
def fetch(ctx: click.Context, job_id: str, dest: Path, with_frames: bool) -> None:
    """Download a finished job's video (and frames) to DEST."""
    from farm.store import Store

    settings = _settings(ctx).require_farm()
    job = Ledger.from_url(settings.redis_url).job(job_id)
    if not job:
        raise FarmError(f"no job {job_id}; `farm jobs` lists the jobs")
    partial = job.get("state") in ("failed", "cancelled", "paused") and with_frames
    if job.get("state") != "done" and not partial:
        raise FarmError(
            f"job {job_id} is {job.get('state')}; its video exists once it is done "
            "(`--frames` fetches the frames done so far of a failed, cancelled or paused job)"
        )
    store = Store.from_settings(settings)
    ext = Path(job.get("output") or "x.mp4").suffix
    target = dest / f"{job_id}{ext}" if dest.is_dir() or str(dest).endswith("/") else dest
    if not partial:
        store.get_file(job["output"], target)
        click.echo(str(target))
    if with_frames:
        frames_dir = (dest if dest.is_dir() else dest.parent) / f"{job_id}-frames"
        # The frames in the scene's own format (EXR, PNG); jobs from before 0.2 kept only PNGs.
        found = store.keys(keys.job_prefix(job_id) + "masters/")
        for key in found or store.keys(keys.job_prefix(job_id) + "frames/"):
            store.get_file(key, frames_dir / Path(key).name)
        click.echo(str(frames_dir))


@cli.command()
@click.option(
    "--queues",
    default="auto",
    show_default=True,
    help="auto (from the hardware probe) or a list such as render,encode,stitch.",
)
@click.option("--concurrency", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option("--name", default=None, help="Worker name (default: farm@HOSTNAME).")
@click.option("--threads", type=click.IntRange(0, 1024), default=0, show_default=True)
@click.option("--cpus", default="", help="Run on these CPUs only (taskset -c form: 0-3,8).")
@click.option(
    "--ping", is_flag=True, help="Ask the running worker on this host to answer, then exit."
)
@click.pass_context
def worker(
    ctx: click.Context,
    queues: str,
    concurrency: int,
    name: str | None,
    threads: int,
    cpus: str,
    ping: bool,
) -> None:
    """Run a worker on this host (inside the worker container on a GPU host)."""
    settings = _settings(ctx).require_farm()
    if ping:
        from farm.dispatch import make_app

        target = name or f"farm@{socket.gethostname()}"
        replies = make_app(settings).control.ping(destination=[target], timeout=5)
        if not replies:
            raise FarmError(f"worker {target} did not answer a ping within 5 s")
        click.echo(f"{target}: pong")
        return
    argv = [
        sys.executable,
        "-m",
        "workers",
        "--queues",
        queues,
        "--concurrency",
        str(concurrency),
        "--threads",
        str(threads),
    ]
    if name:
        argv += ["--name", name]
    if cpus:
        argv += ["--cpus", cpus]
    os.execv(sys.executable, argv)


@cli.command()
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option("--interval-s", type=float, default=None, help="Seconds between passes.")
@click.pass_context
def reconcile(ctx: click.Context, once: bool, interval_s: float | None) -> None:
    """Requeue chunks whose lease expired and open completion gates."""
    from farm.dispatch import Dispatcher, make_app
    from farm.reconcile import Reconciler

    logging.getLogger().setLevel(logging.INFO)
    settings = _settings(ctx).require_farm()
    rec = Reconciler(
        Ledger.from_url(settings.redis_url),
        Dispatcher(make_app(settings)),
        max_lost_leases=settings.max_lost_leases,
    )
    if once:
        click.echo(str(rec.run_once()))
        return
    from farm.webhooks import Notifier

    notifier = Notifier(
        ledger=Ledger.from_url(settings.redis_url, ride_out_s=30),
        notify_url=settings.notify_url,
        secret=settings.webhook_secret,
    )
    notifier.start()  # webhooks drain beside the loop, never inside it
    rec.run_forever(interval_s or settings.reconcile_interval_s)


@cli.command()
@click.option("--address", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=5555, show_default=True)
@click.pass_context
def flower(ctx: click.Context, address: str, port: int) -> None:
    """Run Flower for this farm, behind basic auth (FARM_FLOWER_USER / FARM_FLOWER_PASSWORD)."""
    settings = _settings(ctx).require_farm()
    if not settings.flower_user or not settings.flower_password:
        raise FarmError("Flower needs credentials: set FARM_FLOWER_USER and FARM_FLOWER_PASSWORD")
    env = {
        **os.environ,
        "CELERY_BROKER_URL": settings.redis_url,
        "CELERY_RESULT_BACKEND": settings.redis_url,
        "FLOWER_BASIC_AUTH": f"{settings.flower_user}:{settings.flower_password}",
    }
    argv = [sys.executable, "-m", "celery", "flower", f"--address={address}", f"--port={port}"]
    if settings.tls_cert_file:
        argv += [f"--certfile={settings.tls_cert_file}", f"--keyfile={settings.tls_key_file}"]
    os.execve(sys.executable, argv, env)


@cli.command("store-security", hidden=True)
@click.argument("home", type=click.Path(path_type=Path))
def store_security(home: Path) -> None:
    """Write SeaweedFS's security.toml and the store's CA under HOME (docker-compose.yml's
    `s3-security` step): every SeaweedFS port but S3 then wants its client certificate, and the
    filer and volume their JWTs, signed with $FARM_WEED_JWT_KEY."""
    from farm import weedsec

    key = os.environ.get("FARM_WEED_JWT_KEY", "")
    if len(key) < 32:
        raise ConfigError(
            "set FARM_WEED_JWT_KEY to 32 or more random characters (openssl rand -hex 32)"
        )
    path = weedsec.write_home(home, home / "tls", dict.fromkeys(weedsec.JWT_SECRETS, key))
    click.echo(f"wrote {path}")


@cli.command()
@click.option("--address", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8090, show_default=True)
@click.pass_context
def web(ctx: click.Context, address: str, port: int) -> None:
    """Serve the job pages and the Prometheus metrics (/metrics), behind Flower's credentials."""
    from farm.store import Store
    from farm.web import FarmWeb, serve

    logging.getLogger().setLevel(logging.INFO)
    settings = _settings(ctx).require_farm()
    if not settings.flower_user or not settings.flower_password:
        raise FarmError("farm web needs credentials: set FARM_FLOWER_USER and FARM_FLOWER_PASSWORD")
    app = FarmWeb(
        ledger=Ledger.from_url(settings.redis_url),
        store=Store.from_settings(settings),
        user=settings.flower_user,
        password=settings.flower_password,
    )
    tls_files = (settings.tls_cert_file, settings.tls_key_file) if settings.tls_cert_file else None
    serve(app, address, port, tls_files)


@cli.command()
@click.argument("job_id")
@click.pass_context
def cancel(ctx: click.Context, job_id: str) -> None:
    """Cancel a job: queued chunks never start, running ones stop within seconds."""
    ledger = Ledger.from_url(_settings(ctx).require_farm().redis_url)
    job = _job_or_fail(ledger, job_id)
    if job.get("state") in ENDED:
        raise FarmError(f"job {job_id} is {job['state']} already")
    chunks = ledger.cancel_job(job_id)
    click.echo(
        f"cancelled {job_id} ({len(chunks)} unfinished chunks); `farm retry {job_id} --all` resumes it"
    )


@cli.command()
@click.argument("job_id")
@click.option(
    "--all",
    "every_unfinished",
    is_flag=True,
    help="Requeue every unfinished chunk, not only the failed ones.",
)
@click.option(
    "--scene",
    type=click.Path(path_type=Path),
    default=None,
    help="A fixed .blend to render the remaining frames from.",
)
@click.pass_context
def retry(ctx: click.Context, job_id: str, every_unfinished: bool, scene: Path | None) -> None:
    """Requeue a failed or cancelled job's chunks; frames already done are reused."""
    from farm.jobs import reopen

    settings = _settings(ctx).require_farm()
    if scene is not None:
        check_scene_path(scene)
    waiting = reopen(settings, job_id, every_unfinished=every_unfinished, scene=scene)
    click.echo(f"requeued {job_id}: {len(waiting)} chunks waiting")


@cli.command()
@click.argument("job_id")
@click.option("--chunk", type=int, default=None, help="Only this chunk's attempts.")
@click.pass_context
def logs(ctx: click.Context, job_id: str, chunk: int | None) -> None:
    """Show each attempt's Blender/ffmpeg log from the object store."""
    from farm.store import Store

    store = Store.from_settings(_settings(ctx).require_farm())
    prefix = keys.job_prefix(job_id) + "logs/" + (f"{chunk:05d}-" if chunk is not None else "")
    found = store.keys(prefix)
    if not found:
        raise FarmError(f"no logs for {job_id}{'' if chunk is None else f' chunk {chunk}'} yet")
    for key in found:
        click.echo(f"===== {Path(key).name}")
        click.echo(store.get_bytes(key).decode("utf-8", "replace").rstrip())


def _job_or_fail(ledger: Ledger, job_id: str) -> dict[str, str]:
    job = ledger.job(job_id)
    if not job:
        raise FarmError(f"no job {job_id}; `farm jobs` lists the jobs")
    return job


@cli.group()
def metrics() -> None:
    """Farm metrics for autoscaling."""


@metrics.command("publish")
@click.option("--once", is_flag=True, help="Publish once, then exit.")
@click.option("--interval-s", type=float, default=60.0, show_default=True)
@click.option("--namespace", default="Farm", show_default=True)
@click.option("--farm-name", default="farm", show_default=True)
@click.pass_context
def metrics_publish(
    ctx: click.Context, once: bool, interval_s: float, namespace: str, farm_name: str
) -> None:
    """Publish (queued + running) chunks per worker, per queue, to CloudWatch (BacklogPerWorker)."""
    import boto3

    from farm import census
    from farm.metrics import BacklogPublisher

    logging.getLogger().setLevel(logging.INFO)
    settings = _settings(ctx).require_farm()
    ledger = Ledger.from_url(settings.redis_url)
    publisher = BacklogPublisher(
        boto3.client("cloudwatch", region_name=settings.s3_region),
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


cli.add_command(submit)
for _command in CONTROL_COMMANDS:  # pause, resume, priority, watch (farm/cli_control.py)
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="farm")
