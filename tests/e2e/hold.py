"""Holding a worker's programs still at a point a test chooses, so that what happens next happens
at an event, never in a race with the machine's speed: SIGSTOP every process the worker started
(its Blender in its box, an ffmpeg), never the worker itself, whose lease keeper renews on and
hears of a split; SIGCONT at the end of the block lets them go on where they stood."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (its children, theirs, ...), by /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        # After the command's closing parenthesis: the state, then the parent's pid.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@contextlib.contextmanager
def held(worker: subprocess.Popen[bytes]) -> Iterator[list[int]]:
    """Stop what `worker` runs for the block (the stopped pids are yielded), then let it go on,
    whatever the block raised. Fails when the worker runs nothing: there would be nothing held."""
    stopped: list[int] = []
    try:
        # A process may start another while its parent is being stopped: stop until none is new.
        while new := [pid for pid in descendants(worker.pid) if pid not in stopped]:
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        assert stopped, f"worker {worker.pid} runs no program to hold"
        yield stopped
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
