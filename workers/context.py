"""What every task on a worker shares: settings, ledger, store, dispatcher, capabilities."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from farm.dispatch import Dispatcher
from farm.ledger import Ledger
from farm.settings import Settings
from farm.store import Store
from workers.gpu import Capabilities


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
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when the instance is going away: finish or hand back, take nothing new."""

    def job_dir(self, job_id: str) -> Path:
        path = self.scratch / "jobs" / job_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scene_cache(self) -> Path:
        path = self.scratch / "scenes"
        path.mkdir(parents=True, exist_ok=True)
        return path


def default_worker_name() -> str:
    return f"farm@{socket.gethostname()}"
