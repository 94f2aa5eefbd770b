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


class Reconciler:
    def __init__(self, ledger: Ledger, dispatch: Dispatcher, *, max_lost_leases: int) -> None:
        self.ledger = ledger
        self.dispatch = dispatch
        self.max_lost_leases = max_lost_leases

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
        for job_id in self.ledger.job_ids(limit=200):
            job = self.ledger.job(job_id)
            if job.get("state") == JobState.RUNNING and job.get("chunks_done") == job.get(
                "chunks_total"
            ):
                if self.ledger.try_start_stitch(job_id):
                    self.dispatch.stitch(job_id)
                    result.stitched.append(job_id)

    def run_once(self) -> Pass:
        result = Pass()
        self.expire_leases(result)
        self.open_gates(result)
        return result

    def run_forever(self, interval_s: float) -> None:
        log.info("reconciler running every %.1f s", interval_s)
        while True:
            try:
                result = self.run_once()
                if result.requeued or result.failed or result.stitched:
                    log.info("reconcile: %s", result)
            except FarmError as exc:
                log.warning("reconcile pass failed, will retry: %s", exc)
            time.sleep(interval_s)
