"""Encode beside rendering: a rendered chunk's segment is made while the worker renders its next
chunk, not before it.

On a GPU host the render runs on the GPU's CUDA cores and NVENC is a separate engine, so the
encode that followed each render (seconds for a 4K chunk) left the renderer idle for no reason.
Here the render task hands the chunk's next phase to one lane and returns; Celery gives the
worker its next render at once. The lane runs the phase exactly as the render task would have
(workers.attempt.policy.run_chunk_phase: claim, lease, failure policy), so the ledger owns it from its
claim: a worker killed mid-encode loses nothing, its lease expires and the segment is sent again.
One encode at a time: a render that ends while the last one is still encoding waits for it
(encodes are short beside renders; this only keeps a slow encoder from piling up work that no
message in the broker stands for).

Attempts in the lane are metered at $0 while a paid attempt runs beside them (a render, or an
encode from the broker): that attempt pays for the instance. Their seconds with none beside them
(a worker's last encode of a job, or a render waiting for the encode before it) are charged at
the instance's price: the move that ends the attempt records them (`alone_s`), and the ledger's
meter prices them at the `alone_per_s` its claim recorded.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from farm.adapters.settings import Settings
from workers.host.gpu import Capabilities

log = logging.getLogger(__name__)


def claim_fields(meter: Mapping[str, str]) -> dict[str, str]:
    """What a claim in the lane records over the worker's meter: no price while a paid attempt
    runs beside it, the instance's price for its seconds alone; `lane` counts only those as the
    instance's GPU-seconds (the others are the paid attempt's already)."""
    return {"price_per_s": "0", "alone_per_s": meter.get("price_per_s", "0"), "lane": "1"}


@dataclass(frozen=True, slots=True, kw_only=True)
class LaneRun:
    """One run in the lane, handed to what runs there: when it began and the paid attempts
    beside it. The attempt carries it as an argument (workers.attempt.policy), so it claims at
    the lane's price and its ending moves record its seconds alone."""

    since: float
    paid: Paid

    def end_fields(self) -> dict[str, Any]:
        """What a move that ends the attempt records: its seconds so far with no paid attempt
        beside it (the ledger keeps at most the attempt's own seconds)."""
        return {"alone_s": f"{self.paid.alone_s(self.since, time.time()):.3f}"}


def end_fields(lane: LaneRun | None) -> dict[str, Any]:
    """What a move that ends an attempt records beside its own fields: in the lane, its seconds
    alone (LaneRun.end_fields); elsewhere (`lane` None) nothing."""
    return lane.end_fields() if lane is not None else {}


class Paid:
    """When this worker process runs attempts that pay for the instance (any chunk phase outside
    the lane, on any of its threads: renders, and encodes or transcodes from the broker): what an
    encode in the lane shares the instance with. Spans may overlap (`--concurrency` > 1)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: deque[tuple[float, float]] = deque(maxlen=256)
        self._open: dict[int, float] = {}
        self._keys = itertools.count()

    @contextmanager
    def running(self) -> Iterator[None]:
        key, start = next(self._keys), time.time()
        with self._lock:
            self._open[key] = start
        try:
            yield
        finally:
            with self._lock:
                del self._open[key]
                self._spans.append((start, time.time()))

    def alone_s(self, since: float, until: float) -> float:
        """Seconds of [since, until] with no paid attempt running."""
        with self._lock:
            spans = [*self._spans, *((start, until) for start in self._open.values())]
        covered, reach = 0.0, since
        for start, end in sorted(spans):  # the measure of their union within [since, until]
            if min(end, until) > max(start, reach):
                covered += min(end, until) - max(start, reach)
            reach = max(reach, min(end, until))
        return max(until - since - covered, 0.0)


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
        self.paid = Paid()
        """The worker's attempts outside the lane (workers.attempt.policy times each)."""

    def hand(self, what: str, run: Callable[[LaneRun], object]) -> bool:
        """Run `run` in the lane, with its LaneRun, once the encode before it has ended (waits
        for that one); false once the lane is closed (the caller runs it itself)."""

        def guarded() -> None:
            try:
                run(LaneRun(since=time.time(), paid=self.paid))
            except Exception:  # run_chunk_phase records failures itself; this is a bug
                log.exception("%s raised alongside", what)

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
