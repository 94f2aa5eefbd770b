"""The worker entry point: probe the hardware, then run a Celery worker on the queues it can serve,
each phase's own queue and every project's lanes of it (farm.core.queues: fair share).

    python -m workers --queues auto --concurrency 1 --name farm@host
`farm worker` runs this; it is the one place on a worker that configures logging. Tasks run in
threads of this one process, so the spot watcher, the heartbeat and the running chunk share what
they know about the instance going away.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click
from celery import Celery
from celery.signals import worker_ready, worker_shutting_down

from farm.adapters import cpus as farm_cpus
from farm.adapters.settings import Settings, load_settings
from farm.adapters.store import Store
from farm.adapters.worker_flags import worker_options
from farm.core import cost
from farm.core import queues as queues_
from farm.core.errors import ConfigError, FarmError
from farm.core.pipeline import Queue
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from workers import janitor
from workers.attempt.context import WorkerContext
from workers.attempt.wake import Wakeups
from workers.host import alongside, gpu
from workers.host.box import check_host
from workers.host.spot import Interruption, Rebalance, SpotWatcher, read_identity
from workers.host.warm import WarmPool
from workers.phases import render, splitter
from workers.tasks import register

log = logging.getLogger("workers")
RIDE_OUT_S = 60.0
"""How long workers retry through a Redis restart before a call fails."""
HEARTBEAT_S = 5.0


def build_context(
    settings: Settings,
    app: Celery,
    name: str,
    threads: int,
    caps: gpu.Capabilities,
    queues: list[str],
) -> WorkerContext:
    scratch = Path(settings.scratch_dir or tempfile.gettempdir()) / "farm-worker" / name
    ledger = Ledger.from_url(settings.redis_url, ride_out_s=RIDE_OUT_S)
    ctx = WorkerContext(
        settings=settings,
        ledger=ledger,
        store=Store.from_settings(settings),
        dispatch=Dispatcher(app),
        caps=caps,
        name=name,
        scratch=scratch,
        threads=threads,
        queues=tuple(queues),
        # Only rendering chunks are split: a render worker hears of its own at once.
        wakeups=Wakeups(ledger, name) if str(Queue.RENDER) in queues else None,
        warm=(
            WarmPool(settings.warm_blender_s)
            if str(Queue.RENDER) in queues and settings.warm_blender_s > 0
            else None
        ),
        # Both phases here: the render hands its encode to the lane (NVENC beside the render).
        alongside=(
            alongside.Alongside()
            if {str(Queue.RENDER), str(Queue.ENCODE)} <= set(queues)
            and alongside.wanted(settings, caps)
            else None
        ),
    )
    if ctx.warm is not None and settings.ready_blender:
        ctx.warm.keep_ready(
            lambda: render.ready_blender(ctx), quiet=lambda: not ctx.jobs_here.running()
        )
        ctx.jobs_here.on_quiet = ctx.warm.prestart_soon  # a chunk, an encode or a stitch ended
    if ctx.warm is not None:
        # Once it takes no new chunk (spot notice, rebalance, SIGTERM) no chunk will come for an
        # idle Blender; the chunk in hand keeps its own to the end.
        ctx.drain.on_start.append(ctx.warm.close)
    return ctx


def meter_fields(settings: Settings) -> dict[str, str]:
    """What each claim records to price its attempt: this instance's type and lifecycle from
    instance metadata, or on a local farm the chosen stand-in type, priced on demand."""
    found = read_identity(settings.imds_url)
    if found is None:
        instance = cost.Instance(
            instance_type=settings.local_instance_type,
            lifecycle=cost.Lifecycle.LOCAL,
            region=settings.region,
        )
    else:
        life = found.get("lifecycle", "on-demand")
        instance = cost.Instance(
            instance_type=found["instance_type"],
            lifecycle=cost.Lifecycle.SPOT if life == "spot" else cost.Lifecycle.ON_DEMAND,
            region=found.get("region") or settings.region,
        )
    try:
        return instance.claim_fields(cost.load_prices(settings.price_file))
    except FarmError as exc:  # an instance type the table lacks: still metered, unpriced
        log.warning("%s; its attempts are recorded at $0", exc)
        return {"instance_type": instance.instance_type, "lifecycle": str(instance.lifecycle),
                "price_per_s": "0"}  # fmt: skip


class ProjectQueues:
    """The project lanes this worker consumes beside its phase queues (`served`): read from the
    ledger at start, and checked at each heartbeat against the ledger's projects, so a worker
    that missed `farm project add`'s broadcast (down, starting or cut off then) catches up by
    Celery's own add_consumer."""

    def __init__(self, app: Celery, name: str, served: list[str]) -> None:
        self.app = app
        self.name = name
        self.served = served
        self.consumer: Any = None
        """Celery's consumer, once the worker is ready (worker_ready's sender)."""

    def at_start(self, ledger: Ledger) -> list[str]:
        """Every queue to consume from the start: a ledger that does not answer now leaves the
        projects' lanes to the heartbeat's catch-up."""
        try:
            lanes = ledger.project_lanes()
        except FarmError as exc:
            log.warning("projects unknown at start (%s); their queues are added later", exc)
            lanes = {}
        return queues_.consumed(self.served, lanes)

    def consuming(self) -> list[str]:
        """The queues Celery consumes now ([] before it is ready)."""
        task_consumer = getattr(self.consumer, "task_consumer", None)
        if task_consumer is None:
            return []
        return [str(q.name) for q in list(task_consumer.queues)]

    def projects(self) -> list[str]:
        """The projects whose work this worker takes (its heartbeat shows them)."""
        return sorted({queues_.project_of(q) for q in self.consuming()} - {""})

    def catch_up(self, ledger: Ledger, *, draining: bool) -> list[str]:
        """Ask Celery to consume the lanes of projects this worker does not serve yet (never
        while it drains: it takes no new work then). The queues asked for."""
        if self.consumer is None or draining:
            return []
        have = set(self.consuming())
        wanted = queues_.consumed(self.served, ledger.project_lanes())
        missing = [q for q in wanted if q not in have]
        for queue in missing:
            self.app.control.add_consumer(queue, destination=[self.name], reply=False)
        if missing:
            log.info("consuming project queues %s", ",".join(missing))
        return missing


def stop_consuming(app: Celery, name: str, queues: list[str]) -> None:
    """Take no new chunk: cancel this worker's consumers (the message in hand is unaffected)."""
    for queue in queues:
        try:
            app.control.cancel_consumer(queue, destination=[name], reply=False)
        except Exception as exc:  # the broker may be down; the drain flag still refuses work
            log.warning("could not cancel the %s consumer: %s", queue, exc)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@worker_options
@click.option("--loglevel", default="INFO", show_default=True)
def main(
    queue_spec: str, concurrency: int, name: str, threads: int, cpus: str, loglevel: str
) -> None:
    """Run a farm worker: probe the hardware, then serve the queues it can (what `farm worker`
    and `farm up` start)."""
    logging.basicConfig(level=loglevel, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if cpus:
        # First, before any thread starts: every thread and child inherits the set.
        try:
            share = farm_cpus.parse(cpus)
            farm_cpus.pin(share)
        except ConfigError as exc:
            raise SystemExit(f"farm worker: {exc}") from None
        threads = threads or len(share)
        log.info("worker %s runs on CPUs %s", name, farm_cpus.format_list(share))
    settings = load_settings()
    caps = gpu.probe(
        blender=settings.blender, ffmpeg=settings.ffmpeg, vmaf_ffmpeg=settings.vmaf_ffmpeg
    )
    queues = caps.queues() if queue_spec == "auto" else [q.strip() for q in queue_spec.split(",")]
    try:
        check_host(settings, queues)
    except ConfigError as exc:
        raise SystemExit(f"farm worker: {exc}") from None
    app = make_app(settings)
    ctx = build_context(settings, app, name, threads, caps, queues)
    ctx.ledger.meter = meter_fields(settings)
    register(app, lambda: ctx)
    projects = ProjectQueues(app, name, queues)
    consumed = projects.at_start(ctx.ledger)

    def on_interruption(notice: Interruption) -> None:
        ctx.drain.start(f"spot {notice.action} notice", deadline=notice.deadline)
        stop_consuming(app, name, projects.consuming() or consumed)

    def on_rebalance(notice: Rebalance) -> None:
        ctx.drain.start("rebalance recommendation")
        stop_consuming(app, name, projects.consuming() or consumed)

    watcher = SpotWatcher(
        settings.imds_url, on_interruption=on_interruption, on_rebalance=on_rebalance
    )

    @worker_shutting_down.connect  # type: ignore[untyped-decorator]
    def _shutting_down(**_: Any) -> None:
        # SIGTERM (docker stop, a scale-in): Celery waits for the chunk in hand; the drain makes
        # it finish only what fits in the grace time and hand the rest back, unspent.
        ctx.drain.start("worker shutting down", deadline=time.time() + settings.shutdown_grace_s)

    @worker_ready.connect  # type: ignore[untyped-decorator]
    def _ready(sender: Any = None, **_: Any) -> None:
        projects.consumer = sender  # Celery's consumer: what it consumes, for the catch-up
        if settings.imds_url:
            watcher.start()

    if ctx.wakeups is not None:
        ctx.wakeups.start()
    _start_heartbeat(ctx, queues, projects)
    if ctx.warm is not None:  # a job's first chunk here starts on it (workers.host.warm)
        shutil.rmtree(ctx.scratch / "ready", ignore_errors=True)  # an earlier run's
        ctx.warm.prestart_soon(0)
    splitter.start(ctx)  # no idle tail: split a running chunk when there is nothing to take
    janitor.start(ctx)  # the folders of ended jobs go: weeks of jobs do not fill the disk
    log.info("worker %s serving %s (Cycles: %s, NVENC: %s, encodes %s)", name, ",".join(consumed),
             caps.cycles_device, caps.nvenc,
             "beside renders" if ctx.alongside else "after renders")  # fmt: skip
    try:
        app.worker_main(
            [
                "worker",
                "--queues", ",".join(consumed),
                "--pool", "threads",
                "--concurrency", str(concurrency),
                "--hostname", name,
                "--loglevel", loglevel,
                "--task-events",
                "--without-gossip",
                "--without-mingle",
                "--prefetch-multiplier", "1",
                # Celery imports these as the worker starts; nothing here names them.
                *(["--include", settings.worker_include] if settings.worker_include else []),
            ]
        )  # fmt: skip
    finally:
        if ctx.alongside is not None:
            ctx.alongside.close()  # the encode in hand ends, or hands back on the drain


def _start_heartbeat(ctx: WorkerContext, queues: list[str], projects: ProjectQueues) -> None:
    """Every HEARTBEAT_S: the worker's record in the ledger (`queues`: the phase queues it
    serves; `projects`: the projects whose lanes it consumes), then the catch-up of projects'
    lanes it lacks."""

    def beat() -> None:
        while True:
            try:
                ctx.ledger.heartbeat(
                    ctx.name,
                    {
                        "queues": queues,
                        "projects": projects.projects(),
                        "pid": os.getpid(),
                        "draining": ctx.drain.reason,
                        # Hears of a split of its chunk at once (workers.attempt.wake).
                        "wake": ctx.wakeups is not None and ctx.wakeups.subscribed.is_set(),
                        **ctx.caps.to_json(),
                    },
                )
            except Exception as exc:  # Redis may be restarting; keep beating
                log.warning("heartbeat failed: %s", exc)
            try:
                projects.catch_up(ctx.ledger, draining=ctx.drain.active.is_set())
            except Exception as exc:  # the broker or Redis may be away; the next beat tries
                log.warning("could not catch up with the projects' queues: %s", exc)
            time.sleep(HEARTBEAT_S)

    threading.Thread(target=beat, daemon=True, name="heartbeat").start()


if __name__ == "__main__":
    main(prog_name="python -m workers")
