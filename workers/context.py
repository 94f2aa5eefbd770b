"""What every task on a worker shares: settings, ledger, store, dispatcher, capabilities, and
whether the instance is going away."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from farm.dispatch import Dispatcher
from farm.ledger import Ledger
from farm.settings import Settings
from farm.store import Store
from workers.alongside import Alongside
from workers.gpu import Capabilities
from workers.wake import Wakeups
from workers.warm import WarmPool


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
