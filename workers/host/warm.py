"""Warm Blenders: a worker keeps its Blender, with the job's scene open, between that job's chunks.

A chunk on a cold worker pays Blender's start and the scene's load (0.5 to 1 s for a small scene
here, a minute for a heavy one); every later chunk of the same job on that worker, a split's rest
or the chunks `--chunk-size auto` plans after its probe, starts its first frame at once. The
render script (`farm/blender/script.py --serve`) reads one job file's path a line and ends each chunk
with `FARM-DONE <nonce>`; it refuses a job file that differs from its first in anything but the
frames, nonce and permit.

Each is a workers.host.serving.WarmBlender. One is kept only for the same key (its command line, its
box, its memory cap and its job file but for those three fields: the same job on the same host,
set up the same way), only after a chunk it ended cleanly, and for `warm_blender_s` seconds at
most; anything else (another job, a crash, a stop for a lost lease or a cancel) ends it, so a
chunk never meets a Blender that has seen anything but its own job's scene.

A ready Blender goes further: an idle render worker keeps one started ahead of any job, past its
start-up (bpy's import, half a second to a second), in a box over empty folders of its own
(`<scratch>/ready/<token>`: home, frames, tree). A job's first chunk here adopts it: the folders
move to the job's (a rename, which the box's bind mounts follow), the scene tree is laid out in
them, and the job file the Blender reads names them by the paths it sees. It has opened nothing
before, so a job never meets a Blender that has seen another's scene; it is used only where its
command line, moved to the job's folders, is the one a fresh Blender of the chunk would run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path

from farm.adapters.proc import Result, Running
from farm.blender.script import scene_part
from workers.host.serving import Ready, WarmBlender

log = logging.getLogger(__name__)

SERVING_WAIT_S = 30.0
"""How long a chunk waits for a ready Blender still starting to be running (its box set up:
a few milliseconds, a python start) before it starts its own."""
MAX_IDLE = 4
"""Idle Blenders a worker keeps at most (one per task slot is all it can use)."""


def warm_key(argv: Sequence[str], job: Mapping[str, object], *, memory_limit_bytes: int) -> str:
    """What a chunk needs of a warm Blender to use it: the same command line (box included), the
    same memory cap and the same job file but for its frames, nonce and permit."""
    text = json.dumps(
        [list(argv), memory_limit_bytes, scene_part(job)], sort_keys=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()


class Start(StrEnum):
    """Which Blender ran a chunk."""

    NEW = "new"
    """Started for the chunk: bpy's import, then the scene's load."""
    READY = "ready"
    """A ready Blender the job adopted: started ahead, it loaded the scene."""
    WARM = "warm"
    """The job's Blender from its last chunk here, the scene open: it renders at once."""


class WarmPool:
    """A worker's idle warm Blenders by key, each ended after `idle_s` unused."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._idle: list[tuple[WarmBlender, threading.Timer]] = []
        self.started = 0
        """Blenders started for a chunk (for tests and the benchmarks: chunks minus this were
        warm or ready)."""
        self.closed = False
        self._make_ready: Callable[[], Ready] | None = None
        self._quiet: Callable[[], bool] = lambda: True
        self._ready: WarmBlender | None = None
        self._wake = threading.Event()
        self._due = 0.0
        self._adopted: dict[str, WarmBlender] = {}
        """Ready Blenders whose folders moved to a job's, until that job's chunk runs on one."""
        self.prestarted = 0
        """Ready Blenders started."""

    def keep_ready(self, make: Callable[[], Ready], quiet: Callable[[], bool]) -> None:
        """Keep a ready Blender: `make` says what it is (workers.phases.render.ready_blender); `quiet`
        whether nothing runs on the worker now, when alone one starts."""
        self._make_ready, self._quiet = make, quiet
        threading.Thread(target=self._starter, daemon=True, name="ready-blender").start()

    def prestart(self) -> bool:
        """Start a ready Blender unless one is ready or starting, the worker is draining, or
        work runs here now (its start-up would take the cores a render uses)."""
        if self._make_ready is None or not self._quiet():
            return False
        with self._lock:
            if self.closed or (self._ready is not None and self._ready.alive()):
                return False
            old, self._ready = self._ready, None
        if old is not None:
            old.stop()
        ready: Ready | None = None
        try:
            ready = self._make_ready()
            blender = WarmBlender(
                ready.argv, "", memory_limit_bytes=ready.memory_limit_bytes, ready=ready
            )
        except Exception as exc:  # no ready Blender is no failure: a chunk starts its own
            log.warning("could not start a ready Blender: %s", exc)
            if ready is not None:  # nor its folders, made again after every task
                shutil.rmtree(ready.root, ignore_errors=True)
            return False
        with self._lock:
            if self.closed or self._ready is not None:
                extra: WarmBlender | None = blender
            else:
                self._ready, extra = blender, None
                self.prestarted += 1
        if extra is not None:
            extra.stop()
            return False
        log.info("a ready Blender is starting (%s)", ready.root)
        return True

    def prestart_soon(self, delay_s: float = 2.0) -> None:
        """Start a ready Blender in `delay_s` if the worker is quiet then (a task has ended)."""
        if self._make_ready is None or self.closed:
            return
        with self._lock:
            self._due = time.monotonic() + delay_s
        self._wake.set()

    def _starter(self) -> None:
        """Where ready Blenders start: one thread for the worker's whole life, never ending,
        since a child dies with the thread that started it (farm.adapters.proc's PR_SET_PDEATHSIG): a
        timer's thread, or this one ending on a drain, would kill the Blender a job adopted
        while it renders that job's chunk."""
        while True:
            self._wake.wait()
            self._wake.clear()
            while (left := self._due - time.monotonic()) > 0:
                time.sleep(min(left, 0.5))
            try:
                self.prestart()
            except Exception:  # never the end of this thread (see above)
                log.exception("starting a ready Blender failed")

    def adopt(self, label: str, folders: Mapping[str, Path], script: Sequence[str]) -> bool:
        """Move the ready Blender's folders to a job's (`folders` by name: home, frames, tree)
        for that job's chunk to run on it: only where it runs the chunk's `script` (its command
        line before the box: a trusted job's differs), the job has none of those folders here
        yet and no Blender of its own is idle. The chunk's run checks the whole command line
        (WarmBlender.fits); `release` ends it if no Blender runs."""
        with self._lock:
            blender = self._ready
            if blender is None or any(b.label == label for b, _ in self._idle):
                return False
            assert blender.ready is not None  # a ready one: it has its own folders
            if blender.ready.script != list(script):
                return False
            if label in self._adopted or any(p.exists() for p in folders.values()):
                return False
            self._ready = None
        # Its box binds the folders by path as it starts: they move only once it runs.
        if not blender.wait_serving(SERVING_WAIT_S):
            log.warning("the ready Blender did not start; job %s's chunk starts its own", label)
            blender.stop()
            return False
        places: dict[Path, Path] = {}
        try:
            for name, inside in blender.ready.folders.items():
                target = folders[name]
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(inside, target)  # the box's mounts follow the folder
                places[target] = inside
            blender.ready.root.rmdir()
        except (OSError, KeyError) as exc:
            log.warning("could not hand the ready Blender to job %s: %s", label, exc)
            blender.stop()
            return False
        blender.places, blender.label, blender.ready = places, label, None
        with self._lock:
            if self.closed:
                blender.stop()
                return False
            self._adopted[label] = blender
        return True

    def release(self, label: str) -> None:
        """End the ready Blender `label` adopted if its chunk ran none (its frames were stored
        already, or it failed before Blender): a chunk that renders takes it at once."""
        with self._lock:
            blender = self._adopted.pop(label, None)
        if blender is not None:
            blender.stop()

    def _adopted_for(
        self, label: str, argv: Sequence[str], memory_limit_bytes: int, key: str
    ) -> WarmBlender | None:
        with self._lock:
            blender = self._adopted.pop(label, None)
        if blender is None:
            return None
        if not blender.fits(argv, memory_limit_bytes):
            log.info("the ready Blender does not fit job %s's chunk; starting its own", label)
            blender.stop()
            return None
        blender.key = key
        return blender

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
    ) -> tuple[Result, Start]:
        """Run one chunk (`job`, written to `job_path`) on an idle Blender with its key, else on
        the ready Blender the job (`label`) adopted, else on a new one (the others are ended: a
        worker renders one job's chunks in a row); keep it after a clean chunk. Returns the
        result and which Blender ran it."""
        key = warm_key(argv, job, memory_limit_bytes=memory_limit_bytes)

        def on(blender: WarmBlender) -> Result:
            try:
                return blender.run_chunk(
                    job_path, nonce, job=job, on_line=on_line, log_path=log_path, handle=handle
                )
            except BaseException:  # a full disk, say: never leave it rendering unwatched
                blender.stop()
                raise

        kept = self._take(key)
        start = Start.NEW if kept is None else Start.WARM
        if kept is None and label:  # a ready Blender this job adopted: started, no scene yet
            kept = self._adopted_for(label, argv, memory_limit_bytes, key)
            start = Start.NEW if kept is None else Start.READY
        if kept is not None:
            result = on(kept)
            if not result.ok and not result.stopped and not result.tail:
                # It had ended unseen (it said nothing of this chunk): not the scene's failure;
                # the chunk gets a fresh Blender.
                log.warning("a %s Blender had ended (%s); starting another", start,
                            result.returncode)  # fmt: skip
                kept, start = None, Start.NEW
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
        return result, start

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
            adopted = self._adopted.pop(label, None)
        for blender, timer in ended:
            timer.cancel()
            blender.stop()
        if adopted is not None:  # adopted by a chunk that then rendered nothing
            adopted.stop()
        return len(ended)

    def close(self) -> None:
        """End every idle and ready Blender and keep none after this (the worker is going away
        or draining)."""
        with self._lock:
            idle, self._idle, self.closed = self._idle, [], True
            # An adopted one is the chunk in hand's: it runs that chunk (or is released) first.
            spare, self._ready = self._ready, None
        for blender, timer in idle:
            timer.cancel()
            blender.stop()
        if spare is not None:
            spare.stop()
