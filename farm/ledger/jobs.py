"""A job's record in the ledger: created, moved between states, planned, paused, prioritised
and priced against its budget."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from farm.core import cost, keys
from farm.core.depends import held
from farm.core.pipeline import job_sources_of
from farm.core.plan import Chunk
from farm.core.spec import JobSpec
from farm.core.state import ChunkState, JobState
from farm.ledger.base import Move, wrapped
from farm.ledger.outbox import Outbox

log = logging.getLogger(__name__)

EARLY_UPLOAD = "early_upload"
"""The job field that names the upload its segments are copied into as they are made
(workers.phases.s3join.copy_early)."""
EARLY_PART = "early_part"
"""The chunk field that says which part its segment was copied into: number, the part's ETag,
the segment's ETag, and the samples' offset and length."""


class JobRecords(Outbox):
    """Whole-job moves and fields; every move that lands announces itself (Outbox)."""

    def create_job(
        self,
        *,
        job_id: str,
        spec: JobSpec,
        chunks: Iterable[Chunk],
        source_key: str,
        plan: dict[str, str] | None = None,
    ) -> None:
        """`plan`: chunk_size, chunk_plan (why) and, for an auto-sized job still probing,
        plan_pending=1, which keeps the completion gate shut until `plan_rest` adds the rest;
        with a `project`, the job is counted among the project's jobs too."""
        chunk_list = list(chunks)
        now = time.time()
        # A job with parents waits for them (farm.control.depends): the reconciler queues it.
        state = JobState.WAITING if spec.after else JobState.QUEUED
        after = {"after": ",".join(spec.after), "after_mode": "any" if spec.after_any else "done"}
        with wrapped("record the job"):
            pipe = self.r.pipeline(transaction=True)
            pipe.hset(
                keys.r_job(job_id),
                mapping={
                    "id": job_id,
                    "kind": str(spec.kind),
                    "state": str(state),
                    **(after if spec.after else {}),
                    **({"group": spec.group.id} if spec.group else {}),
                    "spec": json.dumps(spec.to_json()),
                    "source_key": source_key,
                    "chunks_total": len(chunk_list),
                    "chunks_done": 0,
                    "frames_total": spec.frames.count,
                    "created": now,
                    "error": "",
                    "output": "",
                    **(plan or {}),
                },
            )
            for chunk in chunk_list:
                pipe.hset(
                    keys.r_chunk(job_id, chunk.index),
                    mapping={
                        "index": chunk.index,
                        "state": str(ChunkState.QUEUED),
                        "frames": json.dumps(list(chunk.frames)),
                        "frame_count": len(chunk.frames),
                        "attempt": 0,
                        "failures": 0,
                        "interruptions": 0,
                        "token": "",
                        "worker": "",
                        "error": "",
                    },
                )
            pipe.zadd(keys.r_jobs(), {job_id: now})
            for parent in spec.after:  # what a parent's status lists as its children
                pipe.zadd(keys.r_children(parent), {job_id: now})
            if spec.group:  # what its siblings' status lists
                pipe.zadd(keys.r_group(spec.group.id), {job_id: now})
            if project := (plan or {}).get("project"):  # what its quota is summed over
                pipe.zadd(keys.r_project_jobs(project), {job_id: now})
            pipe.zadd(keys.r_live_jobs(), {job_id: now})  # after its record: read, it is whole
            pipe.execute()
        self.event(job_id, "submitted", chunks=len(chunk_list), frames=spec.frames.count)
        if spec.after:
            self.event(job_id, "job-waiting", after=",".join(spec.after), mode=after["after_mode"])

    def release_job(self, job_id: str, reason: str) -> Move:
        """A waiting job whose parents are done (farm.control.depends): queued, and marked
        released (a pause from now on resumes it to running, not to waiting). The caller sends
        its chunks."""
        return self.move_job(job_id, JobState.QUEUED, released=time.time(), released_why=reason)

    def children(self, job_id: str) -> list[str]:
        """The jobs that wait (or waited) for this one, oldest first."""
        with wrapped("read the job's children"):
            found: list[str] = self.r.zrange(keys.r_children(job_id), 0, -1)
        return found

    def group(self, group_id: str) -> list[str]:
        """The jobs of one `farm submit --each`, oldest first."""
        with wrapped("read the job's group"):
            found: list[str] = self.r.zrange(keys.r_group(group_id), 0, -1)
        return found

    def move_job(self, job_id: str, target: JobState, **fields: Any) -> Move:
        sources = ",".join(job_sources_of(target))
        with wrapped(f"move job {job_id} to {target}"):
            status, previous = self.scripts.job_move(
                keys=[keys.r_job(job_id), keys.r_leases()],
                args=[str(target), sources, json.dumps(fields), time.time(), job_id],
            )
        if status == "ok":
            self.event(job_id, f"job-{target}", **fields)
            self.announce(job_id, target)  # webhooks; never raises
        return Move(status=status, previous=previous, target=str(target))

    def replace_source(self, job_id: str, source_key: str) -> None:
        """`farm retry --scene`: the job's remaining chunks render the fixed scene."""
        with wrapped("replace the scene"):
            self.r.hset(keys.r_job(job_id), "source_key", source_key)
        self.event(job_id, "scene-replaced", source_key=source_key)

    def plan_rest(
        self, job_id: str, *, after: int, chunks: list[Chunk], chunk_size: int, reason: str
    ) -> bool:
        """Add an auto-sized job's remaining chunks once (true for the one caller that did).
        `after` is the number of chunks planned so far; the new ones must be numbered from it."""
        if any(c.index != after + i for i, c in enumerate(chunks)):
            raise ValueError("the rest of the plan must be numbered after the probe chunks")
        with wrapped("plan the rest of the job"):
            won = bool(
                self.scripts.plan_rest(
                    keys=[keys.r_job(job_id), *(keys.r_chunk(job_id, c.index) for c in chunks)],
                    args=[
                        time.time(),
                        chunk_size,
                        reason,
                        json.dumps([list(c.frames) for c in chunks]),
                        after,
                    ],
                )
            )
        if won:
            self.event(job_id, "planned", chunk_size=chunk_size, chunks=len(chunks), reason=reason)
        return won

    def bump_job(self, job_id: str, counter: str) -> int:
        """Add one to a job's counter (the stitch's transient retries); returns the new count."""
        with wrapped(f"count {counter}"):
            value: int = self.r.hincrby(keys.r_job(job_id), counter, 1)
        return value

    def job_field_once(self, job_id: str, field: str, value: str) -> str:
        """The job's `field`, set to `value` first where it has none and `value` is not empty:
        of workers racing to set it, all get the first one's. '' for a job that is gone."""
        with wrapped(f"set the job's {field}"):
            found = self.scripts.field_once(keys=[keys.r_job(job_id)], args=[field, value])
        return str(found or "")

    def forget_early_upload(self, job_id: str, upload_id: str) -> bool:
        """Forget the job's early upload, aborted in the store, and its chunks' parts in it: only
        while the job has failed or was cancelled and still names that upload (a retry begins
        anew). True when forgotten."""
        with wrapped("forget the job's early upload"):
            # Read outside the script: a failed or cancelled job is never split, so it holds still.
            total = int(self.r.hget(keys.r_job(job_id), "chunks_total") or 0)
            chunk_keys = [keys.r_chunk(job_id, i) for i in range(total)]
            forgot = self.scripts.forget_early_upload(
                keys=[keys.r_job(job_id), *chunk_keys],
                args=[upload_id, JobState.FAILED, JobState.CANCELLED, EARLY_UPLOAD, EARLY_PART],
            )
        return bool(forgot)

    def remake_chunk(self, job_id: str, index: int, why: str, target: ChunkState) -> bool:
        """A done chunk moved back to `target` (rendered: its frames are encoded again; queued),
        its budget fresh and the job's done count one less, while
        the job has failed or was cancelled (`farm retry`: its segment is gone from the store,
        so the stitch could never join it). True when it moved; a running job is never
        touched: its chunks are the workers'."""
        entry = json.dumps(
            {"t": round(time.time(), 3), "event": "chunk-remade", "chunk": index, "why": why}
        )
        with wrapped(f"make chunk {index} again"):
            moved = self.scripts.remake_chunk(
                keys=[keys.r_chunk(job_id, index), keys.r_job(job_id), keys.r_events(job_id)],
                args=[JobState.FAILED, JobState.CANCELLED, ChunkState.DONE, target,
                      f"{time.time():.3f}", entry, EARLY_PART],
            )  # fmt: skip
        return bool(moved)

    def fix_frames(
        self, job_id: str, *, frames: list[int], chunks: list[int], fields: dict[str, Any]
    ) -> bool:
        """A done job's `frames` fixed in place (`farm retry --frames`, farm.control.fixes): back
        to running with `fields`, the `chunks` that hold the frames queued again (only their
        segments are made again), the frames' records dropped so those chunks render them and
        reuse the rest, and the completed early upload forgotten. False when the job or one of
        the chunks is no longer done (nothing changed)."""
        total = int(self.job(job_id).get("chunks_total") or 0)
        entry = json.dumps({"t": round(time.time(), 3), "event": "frames-fixed",
                            "frames": frames, "chunks": chunks})  # fmt: skip
        with wrapped("fix the job's frames"):
            moved = self.scripts.fix_frames(
                keys=[keys.r_job(job_id), keys.r_frames(job_id), keys.r_events(job_id),
                      keys.r_live_jobs(), *(keys.r_chunk(job_id, i) for i in range(total))],
                args=[JobState.DONE, JobState.RUNNING, ChunkState.DONE, ChunkState.QUEUED,
                      f"{time.time():.3f}", entry, EARLY_PART, EARLY_UPLOAD, json.dumps(frames),
                      json.dumps(chunks), json.dumps(fields), job_id],
            )  # fmt: skip
        if moved:
            self.announce(job_id, JobState.RUNNING)  # webhooks; never raises
        return bool(moved)

    def set_job_fields(self, job_id: str, **fields: str) -> None:
        """Plain fields of the job's record (a fix's record on a failed job, before its retry)."""
        with wrapped("record the job's fields"):
            self.r.hset(keys.r_job(job_id), mapping=fields)

    def cost_record(self, job_id: str) -> dict[str, str]:
        """The job's metered cost hash (see cost.job_cost)."""
        with wrapped("read the job's cost"):
            raw: dict[str, str] = self.r.hgetall(keys.r_cost(job_id))
        return raw

    def attempt_records(self, job_id: str) -> list[dict[str, Any]]:
        """One record per ended attempt: chunk, phase, seconds, dollars, instance, how it ended."""
        with wrapped("read attempt records"):
            raw: list[str] = self.r.lrange(keys.r_attempts(job_id), 0, -1)
        return [json.loads(e) for e in raw]

    def frames_done(self, job_id: str, job: dict[str, str] | None = None) -> int:
        """Frames kept so far: verified frames of a render job, else done chunks' share."""
        job = job if job is not None else self.job(job_id)
        with wrapped("count frames"):
            frames = int(self.r.hlen(keys.r_frames(job_id)))
        total, chunks = int(job.get("frames_total", 0)), int(job.get("chunks_total", 0) or 0)
        # Not while the rest of the plan is pending (a probe wave, a held preview): the chunks
        # so far hold a share of the frames only.
        whole = chunks and job.get("plan_pending") != "1"
        by_chunks = int(job.get("chunks_done", 0)) * total // chunks if whole else 0
        return min(max(frames, by_chunks), total)

    def spend(self, job_id: str, job: dict[str, str] | None = None) -> cost.Spend:
        job = job if job is not None else self.job(job_id)
        return cost.spend_of(
            job, cost.job_cost(self.cost_record(job_id)), self.frames_done(job_id, job)
        )

    def enforce_budget(self, job_id: str) -> bool:
        """Before a claim: pause the job (true) when spent plus expected to finish would pass
        its budget, so the claim is refused and no new chunk starts."""
        with wrapped("read the job's budget"):
            max_cost, state = self.r.hmget(keys.r_job(job_id), "max_cost", "state")
        if float(max_cost or 0) <= 0 or state not in (JobState.QUEUED, JobState.RUNNING):
            return False  # one read per claim for jobs without a budget
        spend = self.spend(job_id)
        if not spend.over_budget:
            return False
        return self.pause_job(job_id, reason=spend.budget_reason(job_id)).moved

    def pause_job(self, job_id: str, reason: str) -> Move:
        """No new chunk starts; running ones finish (their leases renew), frames are kept."""
        return self.move_job(job_id, JobState.PAUSED, paused_reason=reason, paused=time.time())

    def resume_job(self, job_id: str, max_cost: float | None = None) -> Move:
        """Back to running; a job paused while it waited for its parents (never released) goes
        back to waiting instead (Move.target says which)."""
        fields: dict[str, Any] = {"paused_reason": "", "paused": ""}
        if max_cost is not None:
            fields["max_cost"] = max_cost
        target = JobState.WAITING if held(self.job(job_id)) else JobState.RUNNING
        return self.move_job(job_id, target, **fields)

    def priority(self, job_id: str) -> int:
        """The job's priority, 0..100, higher first (50 when unset or unknown)."""
        with wrapped("read the job's priority"):
            value = self.r.hget(keys.r_job(job_id), "priority")
        return int(value) if value else 50

    def set_priority(self, job_id: str, priority: int) -> None:
        with wrapped("set the job's priority"):
            self.r.hset(keys.r_job(job_id), "priority", priority)
        self.event(job_id, "priority", priority=priority)
