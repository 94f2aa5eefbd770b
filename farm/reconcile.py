"""The reconciler: takes back chunks whose lease expired and is the completion gate's backstop.

Safe to run as several copies or to restart at any time: every move it makes is a ledger
transition that only one caller can win.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from farm.dispatch import Dispatcher
from farm.errors import FarmError
from farm.ledger import Ledger
from farm.state import ChunkState, JobState

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Pass:
    """What one reconcile pass did."""

    requeued: list[tuple[str, int]] = field(default_factory=list)
    failed: list[tuple[str, int]] = field(default_factory=list)
    stitched: list[str] = field(default_factory=list)
    resent: list[tuple[str, int]] = field(default_factory=list)
    """Work whose message was lost, sent again (chunk -1: the stitch)."""


class Reconciler:
    def __init__(
        self,
        ledger: Ledger,
        dispatch: Dispatcher,
        *,
        max_lost_leases: int,
        orphan_after_s: float = 60.0,
        stitch_orphan_after_s: float = 900.0,
    ) -> None:
        self.ledger = ledger
        self.dispatch = dispatch
        self.max_lost_leases = max_lost_leases
        self.orphan_after_s = orphan_after_s
        self.stitch_orphan_after_s = stitch_orphan_after_s
        self._next_orphan_sweep = 0.0

    def expire_leases(self, result: Pass, now: float | None = None) -> None:
        for job_id, index in self.ledger.expired_leases(now):
            chunk = self.ledger.chunk(job_id, index)
            state = chunk.get("state", "")
            back_to = {
                ChunkState.RENDERING: ChunkState.QUEUED,
                ChunkState.ENCODING: ChunkState.RENDERED,
            }.get(ChunkState(state) if state else ChunkState.DONE)
            transcode = self.ledger.job(job_id).get("kind") == "encode"
            if transcode and back_to is ChunkState.RENDERED:
                back_to = ChunkState.QUEUED  # an encode job's segment has no render to keep
            if back_to is None:
                # Finished or cancelled meanwhile; the lease entry is stale.
                self.ledger.drop_lease(job_id, index)
                continue
            move = self.ledger.move_chunk(
                job_id,
                index,
                back_to,
                token=chunk.get("token", ""),
                only_from=frozenset({ChunkState(state)}),
                mode="expire",
                max_failures=self.max_lost_leases,
                error=f"lease expired: worker {chunk.get('worker', '?')} stopped answering "
                f"during {state}",
            )
            if not move.moved:
                continue
            if move.target == str(back_to):
                log.warning(
                    "chunk %s/%d: lease of %s expired; requeued", job_id, index, chunk.get("worker")
                )
                if transcode:
                    self.dispatch.transcode(job_id, index)
                elif back_to is ChunkState.QUEUED:
                    self.dispatch.render(job_id, index)
                else:
                    self.dispatch.encode(job_id, index)
                result.requeued.append((job_id, index))
            else:
                result.failed.append((job_id, index))

    def open_gates(self, result: Pass) -> None:
        """A worker that died between finishing the last chunk and sending the stitch is covered here."""
        for job_id in self.ledger.job_ids(limit=1000):
            job = self.ledger.job(job_id)
            complete = job.get("chunks_done") == job.get("chunks_total")
            if (
                job.get("state") == JobState.RUNNING
                and complete
                and self.ledger.try_start_stitch(job_id)
            ):
                self.dispatch.stitch(job_id)
                result.stitched.append(job_id)

    def resend_orphans(self, result: Pass, now: float | None = None) -> None:
        """Re-send work whose message was lost: a worker or the broker died between a ledger move
        and the send. A chunk waiting longer than `orphan_after_s` while its queue is empty has
        no message left anywhere (a duplicate would be harmless: only one claim can win)."""
        now = now or time.time()
        empty = {q: self.ledger.queue_length(q) == 0 for q in ("render", "encode", "stitch")}
        for job_id in self.ledger.job_ids(limit=1000):
            job = self.ledger.job(job_id)
            state = job.get("state")
            if state == JobState.STITCHING:
                started = float(job.get("stitch_started") or now)
                if empty["stitch"] and now - started > self.stitch_orphan_after_s:
                    self.dispatch.stitch(job_id)
                    result.resent.append((job_id, -1))
                continue
            if state not in (JobState.QUEUED, JobState.RUNNING):
                continue
            encode_job = job.get("kind") == "encode"
            for chunk in self.ledger.chunks(job_id):
                chunk_state = chunk.get("state")
                since = float(chunk.get("updated") or job.get("created") or now)
                if now - since < self.orphan_after_s:
                    continue
                index = int(chunk["index"])
                if chunk_state in (ChunkState.QUEUED, ChunkState.INTERRUPTED):
                    if encode_job and empty["encode"]:
                        self.dispatch.transcode(job_id, index)
                    elif not encode_job and empty["render"]:
                        self.dispatch.render(job_id, index)
                    else:
                        continue
                elif chunk_state == ChunkState.RENDERED and empty["encode"]:
                    self.dispatch.encode(job_id, index)
                else:
                    continue
                result.resent.append((job_id, index))

    def run_once(self) -> Pass:
        result = Pass()
        self.expire_leases(result)
        self.open_gates(result)
        if time.monotonic() >= self._next_orphan_sweep:
            self._next_orphan_sweep = time.monotonic() + self.orphan_after_s / 4
            self.resend_orphans(result)
        return result

    def run_forever(self, interval_s: float) -> None:
        log.info("reconciler running every %.1f s", interval_s)
        while True:
            try:
                result = self.run_once()
                if result.requeued or result.failed or result.stitched or result.resent:
                    log.info("reconcile: %s", result)
            except FarmError as exc:
                log.warning("reconcile pass failed, will retry: %s", exc)
            time.sleep(interval_s)
