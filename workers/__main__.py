"""The worker entry point: probe the hardware, then run a Celery worker on the queues it can serve.

    python -m workers --queues auto --concurrency 1 --name farm@host
`farm worker` runs this; it is the one place on a worker that configures logging.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import threading
from pathlib import Path

from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from farm.settings import load_settings
from farm.store import Store
from workers import gpu
from workers.context import WorkerContext, default_worker_name
from workers.tasks import register

log = logging.getLogger("workers")
_CAPS_ENV = "FARM_WORKER_CAPABILITIES"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workers")
    parser.add_argument("--queues", default="auto")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--name", default=default_worker_name())
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.loglevel, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = load_settings()
    caps = gpu.probe(blender=settings.blender, ffmpeg=settings.ffmpeg)
    os.environ[_CAPS_ENV] = json.dumps(caps.to_json())
    queues = caps.queues() if args.queues == "auto" else [q.strip() for q in args.queues.split(",")]
    scratch = Path(settings.scratch_dir or tempfile.gettempdir()) / "farm-worker" / args.name
    app = make_app(settings)
    contexts: dict[int, WorkerContext] = {}
    lock = threading.Lock()

    def get_ctx() -> WorkerContext:
        # One context per process: prefork children must not share the parent's sockets.
        with lock:
            ctx = contexts.get(os.getpid())
            if ctx is None:
                ledger = Ledger.from_url(settings.redis_url)
                ctx = WorkerContext(
                    settings=settings,
                    ledger=ledger,
                    store=Store.from_settings(settings),
                    dispatch=Dispatcher(app),
                    caps=caps,
                    name=args.name,
                    scratch=scratch,
                    threads=args.threads,
                )
                contexts[os.getpid()] = ctx
            return ctx

    register(app, get_ctx)
    _start_heartbeat(settings.redis_url, args.name, queues, caps)
    log.info(
        "worker %s serving %s (Cycles: %s, NVENC: %s)",
        args.name,
        ",".join(queues),
        caps.cycles_device,
        caps.nvenc,
    )
    app.worker_main(
        [
            "worker",
            "--queues",
            ",".join(queues),
            "--concurrency",
            str(args.concurrency),
            "--hostname",
            args.name,
            "--loglevel",
            args.loglevel,
            "--task-events",
            "--without-gossip",
            "--without-mingle",
            "--prefetch-multiplier",
            "1",
        ]
    )


def _start_heartbeat(redis_url: str, name: str, queues: list[str], caps: gpu.Capabilities) -> None:
    ledger = Ledger.from_url(redis_url)

    def beat() -> None:
        while True:
            try:
                ledger.heartbeat(name, {"queues": queues, "pid": os.getpid(), **caps.to_json()})
            except Exception as exc:  # Redis may be restarting; keep beating
                log.warning("heartbeat failed: %s", exc)
            threading.Event().wait(10)

    threading.Thread(target=beat, daemon=True, name="heartbeat").start()


if __name__ == "__main__":
    main()
