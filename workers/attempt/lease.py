"""Holding a chunk's lease while Blender or ffmpeg runs: renew it, stop the work when it is lost,
cancelled or cannot finish before a spot deadline, and keep the attempt's log in the store."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from farm.adapters.proc import Running
from farm.core.errors import FarmError
from workers.attempt.ports import LeaseLedger
from workers.attempt.wake import Wakeups

log = logging.getLogger(__name__)
TICK_S = 0.5
LOG_UPLOAD_EVERY_S = 10.0


class LeaseKeeper:
    """Renews every `renew_s` (at most 2 s, so a cancel stops work within seconds) in a thread.

    A Redis outage shorter than the lease is ridden out: renewals fail, are logged, and the next
    one that gets through restores the lease. `should_stop` is asked every tick; a non-empty
    answer stops the program and is kept in `stopped_for`.
    """

    def __init__(
        self,
        ledger: LeaseLedger,
        *,
        job_id: str,
        chunk: int,
        token: str,
        lease_s: float,
        renew_s: float,
        running: Running,
        should_stop: Callable[[], str] | None = None,
        upload_log: Callable[[], None] | None = None,
        wakeups: Wakeups | None = None,
    ) -> None:
        self.ledger = ledger
        self.job_id = job_id
        self.chunk = chunk
        self.token = token
        self.lease_s = lease_s
        self.renew_s = min(renew_s, 2.0)
        self.running = running
        self.should_stop: Callable[[], str] | None = should_stop
        self.upload_log: Callable[[], None] | None = upload_log
        self.lost: str = ""
        """'' while held; 'lost' or 'cancelled' once the work must stop."""
        self._log_upload: threading.Thread | None = None
        self.renewed = time.monotonic()
        """When the lease was last known extended (the claim, then each renewal that answered):
        past `lease_s` after it, the reconciler may have given the chunk to another worker."""
        self.stopped_for: str = ""
        self.split_last: int | None = None
        """Set once the chunk was split (farm.ledger.split_chunk): render no frame after it."""
        self.on_split: Callable[[int], None] | None = None
        """Told the last frame at every renewal after a split (the render phase's permit)."""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._wakeups = wakeups
        self._thread = threading.Thread(
            target=self._loop, name=f"lease-{job_id}-{chunk}", daemon=True
        )

    def unheard_s(self) -> float:
        """Seconds since the lease was last known extended."""
        return time.monotonic() - self.renewed

    def _renew(self) -> bool:
        asked = time.monotonic()
        try:
            answer = self.ledger.renew(self.job_id, self.chunk, self.token, self.lease_s)
        except FarmError as exc:
            log.warning(
                "lease renewal for %s/%d failed, will retry: %s", self.job_id, self.chunk, exc
            )
            return True
        if answer == "ok" or answer.startswith("split:"):
            self.renewed = asked
        if answer.startswith("split:"):
            self._split(int(float(answer.removeprefix("split:"))))
            return True
        if answer != "ok":
            log.warning(
                "chunk %s/%d: lease %s; stopping this attempt", self.job_id, self.chunk, answer
            )
            self.lost = answer
            self.running.stop()
            return False
        return True

    def _split(self, last: int) -> None:
        if self.split_last is None:
            log.info(
                "chunk %s/%d was split: stopping after frame %d", self.job_id, self.chunk, last
            )
        self.split_last = last
        on_split = self.on_split
        if on_split is not None:
            try:
                on_split(last)
            except OSError as exc:  # told again at the next renewal
                log.warning("chunk %s/%d: could not pass on the split: %s", self.job_id,
                            self.chunk, exc)  # fmt: skip

    def wake(self) -> None:
        """Renew now (another worker split this chunk: hear where to stop before the next
        frame starts)."""
        self._wake.set()

    def _loop(self) -> None:
        next_renew = time.monotonic() + self.renew_s
        next_log = time.monotonic() + LOG_UPLOAD_EVERY_S
        while True:
            self._wake.wait(TICK_S)
            if self._stop.is_set():
                return
            woken = self._wake.is_set()
            self._wake.clear()
            now = time.monotonic()
            if woken or now >= next_renew:
                next_renew = now + self.renew_s
                if not self._renew():
                    return
            should_stop, upload_log = self.should_stop, self.upload_log
            # Neither may end this thread: with it would go the renewals, and the chunk would be
            # handed to another worker while this one goes on rendering it.
            try:
                reason = should_stop() if should_stop and not self.stopped_for else ""
            except Exception:
                log.exception("chunk %s/%d: the stop check failed", self.job_id, self.chunk)
                reason = ""
            if reason:
                log.warning("chunk %s/%d: %s; stopping", self.job_id, self.chunk, reason)
                self.stopped_for = reason
                self.running.stop()
            uploading = self._log_upload is not None and self._log_upload.is_alive()
            if upload_log and now >= next_log and not uploading:
                next_log = now + LOG_UPLOAD_EVERY_S
                # On a thread of its own: a store slow to answer (five tries of a minute) must
                # never hold up a renewal.
                self._log_upload = threading.Thread(
                    target=self._upload_log, args=(upload_log,), daemon=True, name="log-upload"
                )
                self._log_upload.start()

    def _upload_log(self, upload_log: Callable[[], None]) -> None:
        try:
            upload_log()
        except FarmError as exc:
            log.debug("log upload failed: %s", exc)
        except Exception:
            log.exception("chunk %s/%d: the log upload failed", self.job_id, self.chunk)

    def __enter__(self) -> LeaseKeeper:
        if self._wakeups is not None:
            self._wakeups.watch(self.job_id, self.chunk, self.wake)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._wakeups is not None:
            self._wakeups.unwatch(self.job_id, self.chunk)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
