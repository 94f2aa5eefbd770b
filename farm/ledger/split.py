"""Splitting a running chunk in the ledger (no idle tail, farm.core.split): the split itself, once,
under its owner's token, and the owner's wake channel that tells it at once."""

from __future__ import annotations

import logging
import time
from typing import Any

from farm.core import keys
from farm.ledger.base import LedgerBase, wrapped

log = logging.getLogger(__name__)


class SplitRecords(LedgerBase):
    """A chunk's split and its owner's wake-ups."""

    def split_chunk(
        self,
        job_id: str,
        index: int,
        *,
        token: str,
        last_frame: int,
        chunks_total: int,
        min_rest: int = 2,
    ) -> int | None:
        """No idle tail: the rendering chunk keeps its frames up to `last_frame` and a new queued
        chunk, numbered `chunks_total`, takes the rest (at least `min_rest` frames), atomically and
        once. Returns the new chunk's index for the caller that split, else None. Its owner hears
        of it on its wake channel (wakeups) at once, else at its next lease renewal ('split:N'),
        and stops after frame N."""
        with wrapped(f"split chunk {index} of {job_id}"):
            result = self.scripts.split(
                keys=[
                    keys.r_chunk(job_id, index),
                    keys.r_job(job_id),
                    keys.r_chunk(job_id, chunks_total),
                ],
                args=[token, last_frame, chunks_total, time.time(), min_rest],
            )
        if int(result[0]) != 1:
            log.debug("chunk %s/%d not split: %s", job_id, index, result[1])
            return None
        new, kept, moved, owner = int(result[1]), int(result[2]), int(result[3]), result[4]
        self.event(job_id, "split", chunk=index, new_chunk=new, last_frame=last_frame,
                   kept=kept, moved=moved)  # fmt: skip
        if owner:
            with wrapped(f"wake the owner of chunk {index} of {job_id}"):
                self.r.publish(keys.r_wake(owner), f"{job_id} {index}")
        return new

    def wakeups(self, worker: str) -> Any:
        """A subscription to `worker`'s wake channel (redis-py PubSub): `get_message(timeout=)`
        gives {"data": "job_id chunk"} for each of its chunks another worker split."""
        with wrapped("subscribe to wake-ups"):
            sub = self.r.pubsub(ignore_subscribe_messages=True)
            sub.subscribe(keys.r_wake(worker))
        return sub
