"""Warm Blenders: a worker keeps its Blender, with the job's scene open, between that job's chunks.

A chunk on a cold worker pays Blender's start and the scene's load (0.5 to 1 s for a small scene
here, a minute for a heavy one); every later chunk of the same job on that worker, a split's rest
or the chunks `--chunk-size auto` plans after its probe, starts its first frame at once. The
render script (`blender_render.py --serve`) reads one job file's path a line and ends each chunk
with `FARM-DONE <nonce>`; it refuses a job file that differs from its first in anything but the
frames, nonce and permit.

A Blender is kept only for the same key (its command line, its box, its memory cap and its job
file but for those three fields: the same job on the same host, set up the same way), only after a
chunk it ended cleanly, and for `warm_blender_s` seconds at most; anything else (another job, a
crash, a stop for a lost lease or a cancel) ends it, so a chunk never meets a Blender that has
seen anything but its own job's scene.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import queue
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from farm.proc import Result, Running, pump, spawn, stop_group
from workers.blender_render import scene_part

log = logging.getLogger(__name__)

MAX_IDLE = 4
"""Idle Blenders a worker keeps at most (one per task slot is all it can use)."""


def warm_key(argv: Sequence[str], job: Mapping[str, object], *, memory_limit_bytes: int) -> str:
    """What a chunk needs of a warm Blender to use it: the same command line (box included), the
    same memory cap and the same job file but for its frames, nonce and permit."""
    text = json.dumps(
        [list(argv), memory_limit_bytes, scene_part(job)], sort_keys=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()


class WarmBlender:
    """One render script in serve mode and the thread that reads its output."""

    def __init__(
        self, argv: Sequence[str], key: str, *, memory_limit_bytes: int, label: str = ""
    ) -> None:
        self.key = key
        self.label = label
        """What it holds, for the splitter (the job id)."""
        self.argv = list(argv)
        self.popen = spawn(argv, memory_limit_bytes=memory_limit_bytes, stdin=subprocess.PIPE)
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="warm-blender-out").start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            self._lines.put(raw)
        self._lines.put(None)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.alive():
            stop_group(self.popen.pid, 0)
        with contextlib.suppress(OSError):
            assert self.popen.stdin is not None
            self.popen.stdin.close()

    def run_chunk(
        self,
        job_path: Path,
        nonce: str,
        *,
        on_line: Callable[[str], None] | None,
        log_path: Path | None,
        handle: Running,
        tail_lines: int = 60,
    ) -> Result:
        """Hand the script one job file and follow it to its DONE line (returncode 0) or to its
        end (its exit code). The handle stops the whole Blender, as it stops a one-chunk one."""
        started = time.monotonic()
        tail: deque[str] = deque(maxlen=tail_lines)
        handle.popen = self.popen
        if handle.stop_requested.is_set():
            handle.stop()
        try:
            try:
                assert self.popen.stdin is not None
                self.popen.stdin.write(f"{job_path}\n".encode())
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


class WarmPool:
    """A worker's idle warm Blenders by key, each ended after `idle_s` unused."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._idle: list[tuple[WarmBlender, threading.Timer]] = []
        self.started = 0
        """Blenders started (for tests and the benchmarks: chunks minus this were warm)."""
        self.closed = False

    def run(
        self,
        argv: Sequence[str],
        job: Mapping[str, object],
        job_path: Path,
        nonce: str,
        *,
        on_line: Callable[[str], None] | None,
        log_path: Path | None,
        handle: Running,
        memory_limit_bytes: int = 0,
        label: str = "",
    ) -> tuple[Result, bool]:
        """Run one chunk (`job`, written to `job_path`) on an idle Blender with its key, else on
        a new one (the others are ended: a worker renders one job's chunks in a row); keep it
        after a clean chunk. Returns the result and whether the Blender was warm."""
        key = warm_key(argv, job, memory_limit_bytes=memory_limit_bytes)

        def on(blender: WarmBlender) -> Result:
            try:
                return blender.run_chunk(
                    job_path, nonce, on_line=on_line, log_path=log_path, handle=handle
                )
            except BaseException:  # a full disk, say: never leave it rendering unwatched
                blender.stop()
                raise

        kept = self._take(key)
        warm = kept is not None
        if kept is not None:
            result = on(kept)
            if not result.ok and not result.stopped and not result.tail:
                # It had ended unseen (it said nothing of this chunk): not the scene's failure;
                # the chunk gets a fresh Blender.
                log.warning("a warm Blender had ended (%s); starting another", result.returncode)
                kept, warm = None, False
        blender = kept
        if blender is None:
            blender = WarmBlender(argv, key, memory_limit_bytes=memory_limit_bytes, label=label)
            with self._lock:
                self.started += 1
            result = on(blender)
        if result.ok and blender.alive():
            self._keep(blender)
        else:
            blender.stop()
        return result, warm

    def _take(self, key: str) -> WarmBlender | None:
        found, others, kept = None, [], []
        with self._lock:
            for blender, timer in self._idle:
                if blender.key == key and blender.alive():
                    if found is None:
                        timer.cancel()
                        found = blender
                    else:  # another task slot of this worker may want it
                        kept.append((blender, timer))
                else:
                    timer.cancel()
                    others.append(blender)
            self._idle = kept
        for blender in others:
            blender.stop()
        return found

    def _keep(self, blender: WarmBlender) -> None:
        timer = threading.Timer(self.idle_s, self._expire, args=(blender,))
        timer.daemon = True
        with self._lock:
            if self.closed:  # the worker is draining: no chunk will come for it
                blender.stop()
                return
            self._idle.append((blender, timer))
            extra = self._idle[:-MAX_IDLE]
            self._idle = self._idle[-MAX_IDLE:]
        timer.start()
        for old, old_timer in extra:
            old_timer.cancel()
            old.stop()

    def _expire(self, blender: WarmBlender) -> None:
        with self._lock:
            kept = [(b, t) for b, t in self._idle if b is not blender]
            gone = len(kept) != len(self._idle)
            self._idle = kept
        if gone:
            log.info("ending a warm Blender unused for %.0f s", self.idle_s)
            blender.stop()

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def idle_labels(self) -> frozenset[str]:
        """The labels (job ids) of the idle Blenders: jobs a chunk of would start at once."""
        with self._lock:
            return frozenset(b.label for b, _ in self._idle if b.label)

    def end(self, label: str) -> int:
        """End the idle Blenders holding `label` (a job that has ended); how many there were."""
        with self._lock:
            ended = [(b, t) for b, t in self._idle if b.label == label]
            self._idle = [(b, t) for b, t in self._idle if b.label != label]
        for blender, timer in ended:
            timer.cancel()
            blender.stop()
        return len(ended)

    def close(self) -> None:
        """End every idle Blender and keep none after this (the worker is going away or
        draining)."""
        with self._lock:
            idle, self._idle, self.closed = self._idle, [], True
        for blender, timer in idle:
            timer.cancel()
            blender.stop()
