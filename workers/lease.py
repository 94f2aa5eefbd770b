"""Holding a chunk's lease while Blender or ffmpeg runs: renew it, or stop the work when it is lost."""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from farm.errors import FarmError
from farm.ledger import Ledger
from farm.proc import Running

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews the lease every `renew_s` in a thread; on loss or cancel, stops the running program.

    A Redis outage shorter than the lease is ridden out: renewals fail, are logged, and the next
    one that gets through restores the lease.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        job_id: str,
        chunk: int,
        token: str,
        lease_s: float,
        renew_s: float,
        running: Running,
    ) -> None:
        self.ledger = ledger
        self.job_id = job_id
        self.chunk = chunk
        self.token = token
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.running = running
        self.lost: str = ""
        """'' while held; 'lost' or 'cancelled' once the work must stop."""
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"lease-{job_id}-{chunk}", daemon=True
        )

    def _loop(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                answer = self.ledger.renew(self.job_id, self.chunk, self.token, self.lease_s)
            except FarmError as exc:
                log.warning(
                    "lease renewal for %s/%d failed, will retry: %s", self.job_id, self.chunk, exc
                )
                continue
            if answer != "ok":
                log.warning(
                    "chunk %s/%d: lease %s; stopping this attempt", self.job_id, self.chunk, answer
                )
                self.lost = answer
                self.running.stop()
                return

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
