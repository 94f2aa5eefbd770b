"""What every task on a worker shares: settings, ledger, store, dispatcher, capabilities, and
whether the instance is going away."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.dispatch import Dispatcher
from farm.ledger import Ledger
from workers.attempt.wake import Wakeups
from workers.host.alongside import Alongside
from workers.host.gpu import Capabilities
from workers.host.warm import WarmPool


class JobsHere:
    """The jobs with work running in this worker process, and the sweep's hold on one job's
    folder: work of a job and a sweep of its folder never overlap."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running: Counter[str] = Counter()
        self._swept: set[str] = set()
        self.on_quiet: Callable[[], None] | None = None
        """Called as the last work running here ends (the worker keeps a ready Blender then)."""

    @contextmanager
    def using(self, job_id: str) -> Iterator[None]:
        """Work of `job_id` runs in this block; it starts once a sweep of the folder has ended."""
        with self._cond:
            self._cond.wait_for(lambda: job_id not in self._swept)
            self._running[job_id] += 1
        try:
            yield
        finally:
            with self._cond:
                self._running[job_id] -= 1
                if self._running[job_id] <= 0:
                    del self._running[job_id]
                quiet = not self._running
            if quiet and self.on_quiet is not None:
                self.on_quiet()

    @contextmanager
    def sweeping(self, job_id: str) -> Iterator[bool]:
        """True, and the folder is the sweep's until the block ends, unless work of the job
        runs here (False)."""
        with self._cond:
            free = self._running[job_id] == 0
            if free:
                self._swept.add(job_id)
        try:
            yield free
        finally:
            if free:
                with self._cond:
                    self._swept.discard(job_id)
                    self._cond.notify_all()

    def running(self) -> frozenset[str]:
        with self._cond:
            return frozenset(self._running)


@dataclass(slots=True)
class Drain:
    """Set by the spot watcher (or shutdown): take no new chunk; `deadline` for an interruption."""

    active: threading.Event = field(default_factory=threading.Event)
    deadline: float | None = None
    reason: str = ""
    on_start: list[Callable[[], None]] = field(default_factory=list)
    """Called at each start: what the worker lets go of once it takes no new chunk (its idle
    warm Blenders)."""

    def start(self, reason: str, deadline: float | None = None) -> None:
        self.reason = reason
        if deadline is not None:
            self.deadline = deadline
        self.active.set()
        for hook in self.on_start:
            hook()

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.time()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerContext:
    settings: Settings
    ledger: Ledger
    store: Store
    dispatch: Dispatcher
    caps: Capabilities
    name: str
    scratch: Path
    threads: int = 0
    """CPU threads Blender may use; 0: all."""
    queues: tuple[str, ...] = ()
    """The queues this worker consumes: a chunk's next phase on one of them runs here at once,
    with no second trip through the broker (workers.tasks)."""
    drain: Drain = field(default_factory=Drain)
    wakeups: Wakeups | None = None
    """This worker's wake-up subscription (its chunks split by others), when it has one."""
    warm: WarmPool | None = None
    """Blenders kept with a job's scene open for its next chunk here (settings.warm_blender_s)."""
    alongside: Alongside | None = None
    """Where a rendered chunk's encode runs beside the next render (settings.encode_alongside)."""
    jobs_here: JobsHere = field(default_factory=JobsHere)
    """The jobs with work running in this process: their folders stay (workers.janitor)."""

    @property
    def stopping(self) -> threading.Event:
        """Set once the worker takes no new chunks (the drain has started)."""
        return self.drain.active

    def job_dir(self, job_id: str) -> Path:
        path = self.scratch / "jobs" / job_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scene_cache(self) -> Path:
        path = self.scratch / "scenes"
        path.mkdir(parents=True, exist_ok=True)
        return path
