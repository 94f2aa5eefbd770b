"""Wake-ups: a chunk this worker renders was split by another worker, and its lease keeper should
hear it now rather than at its next renewal.

The splitter's ledger publishes "job_id chunk" on the owner's channel (farm.ledger.split_chunk);
this worker keeps one subscription to its own channel and wakes the keeper of that chunk, which
renews at once, learns the split's last frame and passes it to Blender before Blender starts the
next frame. While subscribed, the worker's heartbeat says `wake`, and splitters then leave it a
margin of one frame instead of the frames that start within a renewal interval
(farm.core.split.margin_frames). A message lost while the subscription reconnects only costs that:
the renewal still brings the split.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from farm.ledger import Ledger

log = logging.getLogger(__name__)
RETRY_S = 2.0
POLL_S = 1.0


class Wakeups:
    def __init__(self, ledger: Ledger, worker: str) -> None:
        self.ledger = ledger
        self.worker = worker
        self.subscribed = threading.Event()
        """Set while the subscription is up (the heartbeat reports it)."""
        self._lock = threading.Lock()
        self._watched: dict[tuple[str, int], Callable[[], None]] = {}
        self._stop = threading.Event()

    def watch(self, job_id: str, chunk: int, wake: Callable[[], None]) -> None:
        with self._lock:
            self._watched[(job_id, chunk)] = wake

    def unwatch(self, job_id: str, chunk: int) -> None:
        with self._lock:
            self._watched.pop((job_id, chunk), None)

    def deliver(self, data: str) -> bool:
        """Wake the keeper named by a message; False when no keeper here holds that chunk."""
        job_id, _, chunk = str(data).rpartition(" ")
        try:
            key = (job_id, int(chunk))
        except ValueError:
            log.warning("ignoring a malformed wake-up message: %r", data)
            return False
        with self._lock:
            wake = self._watched.get(key)
        if wake is None:
            return False
        wake()
        return True

    def start(self) -> Wakeups:
        threading.Thread(target=self._loop, name="wakeups", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            sub = None
            try:
                sub = self.ledger.wakeups(self.worker)
                self.subscribed.set()
                while not self._stop.is_set():
                    message = sub.get_message(timeout=POLL_S)
                    if message is not None:
                        self.deliver(message["data"])
            except Exception as exc:  # Redis restarting: renewals still bring splits meanwhile
                self.subscribed.clear()
                log.warning("wake-up subscription lost, resubscribing: %s", exc)
                self._stop.wait(RETRY_S)
            finally:
                if sub is not None:
                    with contextlib.suppress(Exception):  # closing a broken connection
                        sub.close()
        self.subscribed.clear()
