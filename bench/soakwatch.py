"""What the soak sees of its jobs while it runs: every 0.5 s each unfinished job's chunks are read
from the ledger (directly, past the proxies) and each move forward is noted with its time, so the
time the farm took to recover from a fault can be read afterwards (bench/soakcheck.py).

A move is a chunk claimed under a new token, a frame more recorded, a chunk rendered or done, a
running chunk taken back (queued again: its lease ran out, or its worker handed it back), or a job
done. A chunk put back by a rebuild (after a Redis loss) is not a move; its next claim is.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from farm.adapters.store import Store
from farm.control.rebuild import read_control, stored_output
from farm.core.pipeline import running_states
from farm.core.state import ENDED, ChunkState
from farm.ledger import Ledger
from tests.conftest import LocalFarm

log = logging.getLogger(__name__)

PERIOD_S = 0.5
_FORWARD = {ChunkState.RENDERED, ChunkState.DONE}
_BACK = {ChunkState.QUEUED, ChunkState.INTERRUPTED}
_RUNNING = {str(s) for s in running_states()}


@dataclass(frozen=True, slots=True)
class Move:
    at: float
    """time.monotonic() of the read that saw it."""
    job: str
    chunk: int
    what: str
    """claim, frame, rendered, done, requeued, job-done"""
    token: str = ""


@dataclass(slots=True)
class _Seen:
    state: str
    token: str
    frames: int


@dataclass(slots=True)
class Watch:
    farm: LocalFarm
    moves: list[Move] = field(default_factory=list)
    ended: dict[str, str] = field(default_factory=dict)
    """Job -> its final state, as the ledger (or, for a job the ledger lost, the store) says."""
    _jobs: list[str] = field(default_factory=list)
    _seen: dict[tuple[str, int], _Seen] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def add(self, job_id: str) -> None:
        with self._lock:
            self._jobs.append(job_id)

    def live(self) -> list[str]:
        with self._lock:
            return [j for j in self._jobs if j not in self.ended]

    def moves_since(self, since: float) -> list[Move]:
        with self._lock:
            return [m for m in self.moves if m.at >= since]

    def start(self) -> Watch:
        self._thread = threading.Thread(target=self._loop, name="soak-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)

    def _loop(self) -> None:
        ledger, store = self.farm.ledger(), self.farm.store()
        while not self._stop.wait(PERIOD_S):
            for job_id in self.live():
                try:
                    self._read(ledger, store, job_id)
                except Exception as exc:  # Redis gone a while, or the store: read on later
                    log.debug("soak watch: %s: %s", job_id, exc)

    def _read(self, ledger: Ledger, store: Store, job_id: str) -> None:
        job = ledger.job(job_id)
        now = time.monotonic()
        if not job:  # the ledger lost it: a rebuild puts it back, unless it was done
            self._forget(job_id)
            if ledger.mark() is not None:  # rebuilt already: the store has its end, if any
                ended = final_in_store(store, job_id)
                if ended:
                    with self._lock:
                        self.ended[job_id] = ended
            return
        chunks = ledger.chunks(job_id)
        moves = []
        for chunk in chunks:
            if not chunk:
                continue
            index = int(chunk.get("index", -1))
            seen = _Seen(chunk.get("state", ""), chunk.get("token", ""),
                         int(chunk.get("frames_rendered") or 0))  # fmt: skip
            before = self._seen.get((job_id, index))
            self._seen[(job_id, index)] = seen
            if before is None:
                continue
            if seen.token and seen.token != before.token:
                moves.append(Move(now, job_id, index, "claim", seen.token))
            elif seen.frames > before.frames:
                moves.append(Move(now, job_id, index, "frame", seen.token))
            if seen.state != before.state and seen.state in _FORWARD:
                moves.append(Move(now, job_id, index, str(seen.state), seen.token))
            elif seen.state in _BACK and before.state in _RUNNING:
                moves.append(Move(now, job_id, index, "requeued", seen.token))
        state = job.get("state", "")
        with self._lock:
            self.moves += moves
            if state in ENDED:
                self.ended[job_id] = state
                if state == "done":
                    self.moves.append(Move(now, job_id, -1, "job-done"))

    def _forget(self, job_id: str) -> None:
        for key in [k for k in self._seen if k[0] == job_id]:
            del self._seen[key]


def final_in_store(store: Store, job_id: str) -> str:
    """How the store says a job ended ('' where it says it has not): done where its output is
    stored, else a control record's cancelled or failed."""
    if stored_output(store, job_id):
        return "done"
    state = str(read_control(store, job_id).get("state", ""))
    return state if state in ENDED else ""
