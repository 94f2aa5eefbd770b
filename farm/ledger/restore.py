"""A job put back into the ledger from what the store holds of it (farm.control.rebuild), and the
ledger's mark, by which the reconciler notices a ledger that lost writes."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import WatchError

from farm.core import keys
from farm.core.state import ChunkState
from farm.ledger.base import FrameRecord, wrapped
from farm.ledger.outbox import Outbox


@dataclass(frozen=True, slots=True)
class Mark:
    """The ledger's mark: `ledger` names this ledger's life (a new one each time it starts
    empty), `count` grows by one each reconcile pass."""

    ledger: str
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"ledger": self.ledger, "count": self.count}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Mark:
        return cls(ledger=str(data["ledger"]), count=int(data["count"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoredChunk:
    """A chunk as the store says it stands: done with the manifest it names, or waiting."""

    index: int
    frames: Sequence[int]
    manifest: str = ""
    """The done chunk's manifest ('' for a chunk that waits to be rendered)."""


_ACCRUING = ("run_per_s", "run_base")
"""The cost hash's sums of the attempts running when it was kept (farm.core.cost.job_cost): they
ended with the ledger, and a rebuilt job starts with none."""


class RestoreRecords(Outbox):
    def restore_job(
        self,
        job_id: str,
        *,
        job: Mapping[str, str],
        chunks: Sequence[RestoredChunk],
        records: Mapping[int, FrameRecord],
        submitted: float,
        claims: Mapping[int, int],
        cost: Mapping[str, str] | None = None,
    ) -> bool:
        """Write the job back, whole, in one transaction, only where the ledger holds no record
        of it (a rebuild racing another, or a job the ledger kept, changes nothing): its hash
        (`job`: every field but the counts), its chunks, its frames' records and its place in
        the job lists. `claims`: each chunk's claims so far (its next claim counts on from
        them); `cost`: the job's spend as last kept (its cost hash, less the running attempts'
        accrual, which ended with them). True when written."""
        done = [c for c in chunks if c.manifest]
        fields = {**job, "chunks_total": len(chunks), "chunks_done": len(done)}
        with wrapped("rebuild the job"), self.r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(keys.r_job(job_id))
                if pipe.exists(keys.r_job(job_id)):
                    return False
                pipe.multi()
                pipe.hset(keys.r_job(job_id), mapping=fields)
                for chunk in chunks:
                    state = ChunkState.DONE if chunk.manifest else ChunkState.QUEUED
                    pipe.hset(
                        keys.r_chunk(job_id, chunk.index),
                        mapping={
                            "index": chunk.index,
                            "state": str(state),
                            "frames": json.dumps(list(chunk.frames)),
                            "frame_count": len(chunk.frames),
                            "attempt": 0,
                            "claims": claims.get(chunk.index, 0),
                            "failures": 0,
                            "interruptions": 0,
                            "token": "",
                            "worker": "",
                            "error": "",
                            "manifest": chunk.manifest,
                        },
                    )
                if records:
                    pipe.hset(
                        keys.r_frames(job_id),
                        mapping={str(frame): r.encode() for frame, r in records.items()},
                    )
                spent = {k: v for k, v in (cost or {}).items() if k not in _ACCRUING}
                if spent:
                    pipe.hset(keys.r_cost(job_id), mapping=spent)
                pipe.zadd(keys.r_jobs(), {job_id: submitted})
                for parent in filter(None, job.get("after", "").split(",")):
                    pipe.zadd(keys.r_children(parent), {job_id: submitted})  # its parents' lists
                if group := job.get("group"):  # its siblings' lists
                    pipe.zadd(keys.r_group(group), {job_id: submitted})
                if project := job.get("project"):  # its spend counts against its quota again
                    pipe.zadd(keys.r_project_jobs(project), {job_id: submitted})
                pipe.zadd(keys.r_live_jobs(), {job_id: submitted})
                pipe.execute()
            except WatchError:
                return False  # another rebuild wrote it first
        self.event(
            job_id, "rebuilt", chunks=len(chunks), chunks_done=len(done), frames_kept=len(records)
        )
        return True

    def add_frame_records(self, job_id: str, records: Mapping[int, FrameRecord]) -> int:
        """Records of frames the store holds that the ledger lost (rolled back): each only where
        the ledger has none for its frame. The number added."""
        added = 0
        with wrapped("restore frame records"):
            pipe = self.r.pipeline(transaction=False)
            for frame, r in records.items():
                pipe.hsetnx(keys.r_frames(job_id), str(frame), r.encode())
            added = sum(1 for x in pipe.execute() if x)
        return added

    def raise_claims(self, job_id: str, claims: Mapping[int, int]) -> int:
        """Each chunk's claim count raised to at least what the store has seen of its index
        (never lowered): a ledger rolled back to before those claims must not hand their numbers
        out again. The number of chunks raised."""
        with wrapped("raise the chunks' claim counts"):
            raised = [
                self.scripts.raise_claims(keys=[keys.r_chunk(job_id, index)], args=[count])
                for index, count in claims.items()
                if count > 0
            ]
        return sum(1 for r in raised if r)

    def mark(self) -> Mark | None:
        """The ledger's mark, None when it has none (an empty ledger, or one from before marks)."""
        with wrapped("read the ledger's mark"):
            ledger, count = self.r.hmget(keys.r_ledger_mark(), "ledger", "count")
        return None if ledger is None else Mark(ledger=ledger, count=int(count or 0))

    def advance_mark(self, base: Mark | None = None, *, read: Mark | None = None) -> Mark | None:
        """One more pass: the mark's count plus one, counting on from `base` (the store's copy)
        where the ledger's is behind it (a new ledger, or one rolled back), so a later loss is
        seen against it; a ledger without a mark gets a new name. Only under the mark `read`
        this pass (None: the ledger had none): None where the ledger was lost since, unmarked,
        so the next pass sees the loss."""
        new = f"{time.time():.0f}-{secrets.token_hex(4)}"
        with wrapped("advance the ledger's mark"):
            moved = self.scripts.advance_mark(
                keys=[keys.r_ledger_mark()],
                args=[read.ledger if read else "", new, "" if base is None else base.count],
            )
        return Mark(ledger=str(moved[0]), count=int(moved[1])) if moved else None
