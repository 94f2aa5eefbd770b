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

Attempts in the lane are metered at $0 (their seconds are kept): the instance's time is already
paid by the render running beside them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from farm.settings import Settings
from workers.gpu import Capabilities

log = logging.getLogger(__name__)

CLAIM_FIELDS = {"price_per_s": "0"}
"""What a claim in the lane records over the worker's meter: no price (see above)."""


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

    def hand(self, what: str, run: Callable[[], object]) -> bool:
        """Run `run` in the lane once the encode before it has ended (waits for that one); false
        once the lane is closed (the caller runs it itself)."""

        def guarded() -> None:
            try:
                run()
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
