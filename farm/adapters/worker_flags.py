"""The worker's command-line options, declared once: `farm worker` takes them and passes them on
to `python -m workers`, which takes them again (the worker may not import the CLI above it)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def default_worker_name() -> str:
    return f"farm@{socket.gethostname()}"


WORKER_OPTIONS = (
    click.option(
        "--queues",
        "queue_spec",
        default="auto",
        show_default=True,
        help="auto (from the hardware probe) or a list such as render,encode,stitch.",
    ),
    click.option("--concurrency", type=click.IntRange(1, 64), default=1, show_default=True),
    click.option("--name", default=default_worker_name, show_default="farm@HOSTNAME"),
    click.option(
        "--threads",
        type=click.IntRange(0, 1024),
        default=0,
        show_default=True,
        help="CPU threads Blender may use; 0: all (of --cpus where given).",
    ),
    click.option(
        "--cpus",
        default="",
        help="Run on these CPUs only, as taskset -c writes them (0-3,8): this worker, its "
        "Blender and its encodes. Default: every CPU it may use.",
    ),
)
"""A worker's options: `farm worker` takes them and passes them on to `python -m workers`."""


def worker_options(command: F) -> F:
    for option in reversed(WORKER_OPTIONS):
        command = option(command)
    return command
