"""Encode beside rendering: a rendered chunk's segment is made while the worker renders its next
chunk, not before it.

On a GPU host the render runs on the GPU's CUDA cores and NVENC is a separate engine, so the
encode that followed each render (seconds for a 4K chunk) left the renderer idle for no reason.
Here the render task hands the chunk's next phase to one lane and returns; Celery gives the
worker its next render at once. The lane runs the phase exactly as the render task would have
(workers.tasks.run_chunk_phase: claim, lease, failure policy), so the ledger owns it from its
claim: a worker killed mid-encode loses nothing, its lease expires and the segment is sent again.
One encode at a time: a render that ends while the last one is still encoding waits for it
(encodes are short beside renders; this only keeps a slow encoder from piling up work that no
message in the broker stands for).

Attempts in the lane are metered at $0 while a render runs beside them: the render pays for the
instance. Their seconds with no render beside them (a worker's last encode of a job, or a render
waiting for the encode before it) are charged at the instance's price: the move that ends the
attempt records them (`alone_s`), and the ledger's meter prices them at the `alone_per_s` its
claim recorded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from farm.settings import Settings
from workers.gpu import Capabilities

log = logging.getLogger(__name__)

_lane = threading.local()
"""The lane thread's attempt: when it began and the renders beside it (see end_fields)."""


def claim_fields(meter: Mapping[str, str]) -> dict[str, str]:
    """What a claim in the lane records over the worker's meter: no price while a render runs
    beside it, the instance's price for its seconds alone."""
    return {"price_per_s": "0", "alone_per_s": meter.get("price_per_s", "0")}


def end_fields() -> dict[str, Any]:
    """What the move that ends an attempt records: in the lane, its seconds so far with no render
    beside it (the ledger keeps at most the attempt's own seconds); elsewhere nothing."""
    since: float | None = getattr(_lane, "since", None)
    if since is None:
        return {}
    renders: Renders = _lane.renders
    return {"alone_s": f"{renders.alone_s(since, time.time()):.3f}"}


class Renders:
    """When this worker process renders: what an encode in the lane shares the instance with.
    One render at a time, so the spans do not overlap; the last few are enough (an encode waits
    for at most one render to hand it over)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: deque[tuple[float, float]] = deque(maxlen=16)
        self._open: float | None = None

    @contextmanager
    def rendering(self) -> Iterator[None]:
        start = time.time()
        with self._lock:
            self._open = start
        try:
            yield
        finally:
            with self._lock:
                self._open = None
                self._spans.append((start, time.time()))

    def alone_s(self, since: float, until: float) -> float:
        """Seconds of [since, until] with no render running."""
        with self._lock:
            spans = [*self._spans, *([(self._open, until)] if self._open is not None else [])]
        shared = sum(max(min(end, until) - max(start, since), 0.0) for start, end in spans)
        return max(until - since - shared, 0.0)


def wanted(settings: Settings, caps: Capabilities) -> bool:
    """`encode_alongside`: on, off, or (auto) on where the encoder is NVENC."""
    if settings.encode_alongside == "auto":
        return caps.nvenc
    return settings.encode_alongside == "on"


class Alongside:
    """One lane for a worker's encodes beside its renders."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alongside")
        self._lock = threading.Lock()
        self._last: Future[None] | None = None
        self._closed = False
        self.renders = Renders()
        """The worker's renders (workers.tasks times each): what the lane's encodes share."""

    def hand(self, what: str, run: Callable[[], object]) -> bool:
        """Run `run` in the lane once the encode before it has ended (waits for that one); false
        once the lane is closed (the caller runs it itself)."""

        def guarded() -> None:
            _lane.since, _lane.renders = time.time(), self.renders
            try:
                run()
            except Exception:  # run_chunk_phase records failures itself; this is a bug
                log.exception("%s raised alongside", what)
            finally:
                _lane.since = None

        with self._lock:
            if self._closed:
                return False
            if self._last is not None:
                self._last.result()
            self._last = self._pool.submit(guarded)
            return True

    def close(self) -> None:
        """Let the encode in hand end (it obeys the worker's drain as any chunk does)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)
