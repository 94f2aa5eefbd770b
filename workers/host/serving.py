"""A render script in serve mode (`farm/blender/script.py --serve`): one Blender process that renders
the job files handed to it a line at a time, each chunk ending at its `FARM-DONE <nonce>` line.

A ready one (`Ready`) was started ahead of any job over empty folders of its own; once a job adopts
it, its folders are the job's and `places` says where its box shows them, so the job file it reads
(`moved_job`) and the command line it is checked against (`WarmBlender.fits`) name the paths it
sees. workers.host.warm keeps these processes between chunks and decides which chunk runs on which.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.adapters.proc import Result, Running, lines_of, pump, spawn, stop_group
from farm.blender.script import SERVING

log = logging.getLogger(__name__)


def moved(text: str, places: Mapping[Path, Path]) -> str:
    """`text` with a leading folder of `places` (outside, as the worker sees it) replaced by the
    one the box shows there (inside): the paths a ready Blender sees."""
    for outside, inside in places.items():
        out = str(outside)
        if text == out or text.startswith(out + "/"):
            return str(inside) + text[len(out) :]
    return text


MOVED_FIELDS = ("scene", "out_dir", "permit")
"""A job file's paths on this host (farm.blender.command.job_file), beside remap's values."""


def moved_job(job: Mapping[str, Any], places: Mapping[Path, Path]) -> dict[str, Any]:
    """The job file with its paths on this host moved: the scene, the output folder, the permit
    and the tree copies remap points to (never remap's keys or allow_missing: stored paths)."""
    out = dict(job)
    for name in MOVED_FIELDS:
        if isinstance(out.get(name), str):
            out[name] = moved(out[name], places)
    if isinstance(out.get("remap"), dict):
        out["remap"] = {k: moved(v, places) if isinstance(v, str) else v
                        for k, v in out["remap"].items()}  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class Ready:
    """How to start a ready Blender: its command line (`script`, boxed over `folders`), memory
    cap and folders by name (home, frames, tree), all inside `root`."""

    script: list[str]
    argv: list[str]
    memory_limit_bytes: int
    root: Path
    folders: dict[str, Path]


class WarmBlender:
    """One render script in serve mode and the thread that reads its output."""

    def __init__(
        self,
        argv: Sequence[str],
        key: str,
        *,
        memory_limit_bytes: int,
        label: str = "",
        ready: Ready | None = None,
    ) -> None:
        self.key = key
        self.label = label
        """What it holds, for the splitter (the job id)."""
        self.argv = list(argv)
        self.memory_limit_bytes = memory_limit_bytes
        self.ready = ready
        """Started ahead of any job, over these folders, until a job adopts it."""
        self.places: dict[Path, Path] = {}
        """Where its folders are now (a job's) to where its box shows them (WarmPool.adopt)."""
        self.popen = spawn(argv, memory_limit_bytes=memory_limit_bytes, stdin_pipe=True)
        self.serving = threading.Event()
        """Its script runs: the box's folders are bound (a ready Blender's may move now)."""
        # Bounded: a Blender that prints while no chunk reads it waits, rather than growing this.
        self._lines: queue.Queue[bytes | None] = queue.Queue(maxsize=1000)
        self.stopped = False
        threading.Thread(target=self._read, daemon=True, name="warm-blender-out").start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in lines_of(self.popen.stdout):
            if not self.serving.is_set() and raw.strip() == SERVING.encode():
                self.serving.set()
                continue
            self._put(raw)
        self._put(None)

    def _put(self, line: bytes | None) -> None:
        """Wait for room while a chunk may read it; once the Blender is stopped, no one will:
        the oldest line makes room (this thread never hangs on a full queue)."""
        while True:
            try:
                self._lines.put(line, timeout=1.0)
                return
            except queue.Full:
                if not self.stopped:
                    continue
                with contextlib.suppress(queue.Empty):
                    self._lines.get_nowait()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_serving(self, timeout_s: float) -> bool:
        """Whether its script is running (within `timeout_s`), not ended before it could."""
        deadline = time.monotonic() + timeout_s
        while not self.serving.wait(0.02):
            if not self.alive() or time.monotonic() > deadline:
                return False
        return self.alive()

    def stop(self) -> None:
        self.stopped = True
        if self.alive():
            stop_group(self.popen.pid, 0)
        with contextlib.suppress(OSError):
            assert self.popen.stdin is not None
            self.popen.stdin.close()
        if self.ready is not None:  # its folders stayed its own
            shutil.rmtree(self.ready.root, ignore_errors=True)

    def _forget_earlier_lines(self) -> None:
        """What it said before this chunk (a ready Blender's start-up) is no line of the chunk:
        a chunk that hears nothing of its own is one a Blender that had ended never began."""
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return
            if line is None:  # it has ended: the chunk hears that at once
                self._lines.put(None)
                return
            log.debug("a Blender said before its chunk: %r", line[:200])

    def fits(self, argv: Sequence[str], memory_limit_bytes: int) -> bool:
        """Whether it runs what a fresh Blender of a chunk, boxed over the job's folders, would."""
        return memory_limit_bytes == self.memory_limit_bytes and self.argv == [
            moved(a, self.places) for a in argv
        ]

    def run_chunk(
        self,
        job_path: Path,
        nonce: str,
        *,
        job: Mapping[str, object] | None = None,
        on_line: Callable[[str], None] | None,
        log_path: Path | None,
        handle: Running,
        tail_lines: int = 60,
    ) -> Result:
        """Hand the script one job file and follow it to its DONE line (returncode 0) or to its
        end (its exit code). The handle stops the whole Blender, as it stops a one-chunk one.
        `job`: written to `job_path` first, with the paths this Blender sees."""
        started = time.monotonic()
        tail: deque[str] = deque(maxlen=tail_lines)
        if job is not None:
            job_path.write_text(json.dumps(moved_job(job, self.places)))
        self._forget_earlier_lines()
        handle.popen = self.popen
        if handle.stop_requested.is_set():
            handle.stop()
        try:
            try:
                assert self.popen.stdin is not None
                self.popen.stdin.write(f"{moved(str(job_path), self.places)}\n".encode())
                self.popen.stdin.flush()
            except OSError:  # it has ended; its exit code and last lines follow below
                pass
            # DONE anywhere in a line: a C library's unflushed bytes may come before it.
            finished = pump(
                iter(self._lines.get, None), on_line=on_line, log_path=log_path, tail=tail,
                handle=handle, until=f"FARM-DONE {nonce} ",
            )  # fmt: skip
        finally:
            handle.popen = None  # a late stop of this chunk must not end the next one
        stopped = handle.stop_requested.is_set()
        if finished and not stopped:
            returncode = 0
        else:
            self.stop()
            returncode = self.popen.wait()
        return Result(
            argv=self.argv,
            returncode=returncode,
            tail=list(tail),
            duration_s=time.monotonic() - started,
            stopped=stopped,
        )
