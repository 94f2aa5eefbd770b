"""The job ledger in Redis: job and chunk state, attempts, leases, timings, events.

Celery only carries messages; this is the record. Every state change is one atomic Lua script,
and every one is idempotent: finishing a chunk twice changes nothing the second time.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from farm import keys
from farm.chunking import Measurement
from farm.errors import LedgerError, UnreachableError
from farm.ledger_lua import CHUNK_MOVE, JOB_MOVE, PLAN_REST, RENEW, START_STITCH
from farm.plan import Chunk
from farm.spec import JobSpec
from farm.state import ChunkState, JobState, job_sources_of, sources_of

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """What a transition did: `ok` moved it; `same` found it there already (a no-op)."""

    status: str
    previous: str
    token: str = ""
    target: str = ""

    @property
    def moved(self) -> bool:
        return self.status == "ok"


@contextmanager
def _wrapped(what: str) -> Iterator[None]:
    try:
        yield
    except redis.ConnectionError as exc:
        raise UnreachableError(f"Redis does not answer while trying to {what}: {exc}") from exc
    except redis.RedisError as exc:
        raise LedgerError(f"Redis refused to {what}: {exc}") from exc


class Ledger:
    """All of the farm's Redis state goes through here."""

    def __init__(self, client: redis.Redis) -> None:
        # decode_responses=True: every reply is str; redis-py's stubs cannot express that.
        self.r: Any = client
        self._move = client.register_script(CHUNK_MOVE)
        self._renew = client.register_script(RENEW)
        self._stitch = client.register_script(START_STITCH)
        self._job_move = client.register_script(JOB_MOVE)
        self._plan_rest = client.register_script(PLAN_REST)

    @classmethod
    def from_url(cls, url: str, *, ride_out_s: float = 0.0) -> Ledger:
        """`ride_out_s` > 0 (workers, reconciler): retry through a Redis restart that long, so a
        short outage delays work instead of failing it. The CLI answers at once instead."""
        retries = 0
        if ride_out_s > 0:
            retries = max(1, int(ride_out_s / 2))
        client = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=10,
            health_check_interval=15,
            retry=Retry(ExponentialBackoff(cap=2.0, base=0.25), retries),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError] if retries else [],
        )
        return cls(client)

    def ping(self) -> None:
        with _wrapped("ping"):
            self.r.ping()

    def call(self, what: str, fn: Callable[[], T]) -> T:
        with _wrapped(what):
            return fn()

    # ── jobs ──────────────────────────────────────────────────────────────────────────────────
    def create_job(
        self,
        *,
        job_id: str,
        spec: JobSpec,
        chunks: Iterable[Chunk],
        scene_key: str,
        plan: dict[str, str] | None = None,
    ) -> None:
        """`plan`: chunk_size, chunk_plan (why) and, for an auto-sized job still probing,
        plan_pending=1, which keeps the completion gate shut until `plan_rest` adds the rest."""
        chunk_list = list(chunks)
        now = time.time()
        with _wrapped("record the job"):
            pipe = self.r.pipeline(transaction=True)
            pipe.hset(
                keys.r_job(job_id),
                mapping={
                    "id": job_id,
                    "kind": str(spec.kind),
                    "state": str(JobState.QUEUED),
                    "spec": json.dumps(spec.to_json()),
                    "scene_key": scene_key,
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
            pipe.execute()
        self.event(job_id, "submitted", chunks=len(chunk_list), frames=spec.frames.count)

    def job(self, job_id: str) -> dict[str, str]:
        with _wrapped("read the job"):
            data: dict[str, str] = self.r.hgetall(keys.r_job(job_id))
        return data

    def chunks(self, job_id: str) -> list[dict[str, str]]:
        total = int(self.job(job_id).get("chunks_total", 0))
        with _wrapped("read the chunks"):
            pipe = self.r.pipeline(transaction=False)
            for i in range(total):
                pipe.hgetall(keys.r_chunk(job_id, i))
            result: list[dict[str, str]] = pipe.execute()
        return result

    def chunk(self, job_id: str, index: int) -> dict[str, str]:
        with _wrapped("read the chunk"):
            data: dict[str, str] = self.r.hgetall(keys.r_chunk(job_id, index))
        return data

    def job_ids(self, limit: int = 50) -> list[str]:
        """Newest first."""
        with _wrapped("list jobs"):
            ids: list[str] = self.r.zrevrange(keys.r_jobs(), 0, limit - 1)
        return ids

    def move_job(self, job_id: str, target: JobState, **fields: Any) -> Move:
        sources = ",".join(job_sources_of(target))
        with _wrapped(f"move job {job_id} to {target}"):
            status, previous = self._job_move(
                keys=[keys.r_job(job_id)], args=[str(target), sources, json.dumps(fields)]
            )
        if status == "ok":
            self.event(job_id, f"job-{target}", **fields)
        return Move(status=status, previous=previous, target=str(target))

    def plan_rest(
        self, job_id: str, *, after: int, chunks: list[Chunk], chunk_size: int, reason: str
    ) -> bool:
        """Add an auto-sized job's remaining chunks once (true for the one caller that did).
        `after` is the number of chunks planned so far; the new ones must be numbered from it."""
        if any(c.index != after + i for i, c in enumerate(chunks)):
            raise ValueError("the rest of the plan must be numbered after the probe chunks")
        with _wrapped("plan the rest of the job"):
            won = bool(
                self._plan_rest(
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

    def try_start_stitch(self, job_id: str) -> bool:
        """The completion gate: true for exactly one caller once every chunk is done."""
        with _wrapped("open the completion gate"):
            won = bool(self._stitch(keys=[keys.r_job(job_id)], args=[time.time()]))
        if won:
            self.event(job_id, "stitch-gate")
        return won

    # ── chunks ────────────────────────────────────────────────────────────────────────────────
    def move_chunk(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        token: str = "",
        lease_s: float | None = None,
        mode: str = "",
        max_failures: int = 0,
        only_from: frozenset[ChunkState] | None = None,
        **fields: Any,
    ) -> Move:
        """Move a chunk if the table allows it from where it is (narrowed by `only_from`), the
        token matches (when given) and, for a claim, the job still runs."""
        now = time.time()
        expiry = "" if lease_s is None else str(now + lease_s)
        if lease_s is not None:
            fields["lease_expires"] = expiry
        sources = (
            ",".join(
                sources_of(target)
                | (
                    {ChunkState.RENDERING, ChunkState.ENCODING}
                    if mode in ("fail", "expire")
                    else set()
                )
            )
            if only_from is None
            else ",".join(only_from)
        )
        with _wrapped(f"move chunk {index} of {job_id} to {target}"):
            result = self._move(
                keys=[keys.r_chunk(job_id, index), keys.r_job(job_id), keys.r_leases()],
                args=[
                    str(target),
                    sources,
                    token,
                    keys.lease_member(job_id, index),
                    expiry,
                    json.dumps(fields),
                    mode,
                    secrets.token_hex(4),
                    now,
                    max_failures,
                ],
            )
        move = Move(
            status=result[0],
            previous=result[1],
            token=result[2] if len(result) > 2 else "",
            target=result[3] if len(result) > 3 else "",
        )
        if move.moved:
            self.event(job_id, f"chunk-{move.target}", chunk=index, **fields)
        return move

    def renew(self, job_id: str, index: int, token: str, lease_s: float) -> str:
        """'ok', 'lost' (another attempt owns the chunk) or 'cancelled' (stop now)."""
        expiry = time.time() + lease_s
        with _wrapped("renew a lease"):
            answer: str = self._renew(
                keys=[keys.r_chunk(job_id, index), keys.r_leases()],
                args=[token, expiry, keys.lease_member(job_id, index), keys.r_job(job_id)],
            )
        return answer

    def drop_lease(self, job_id: str, index: int) -> None:
        with _wrapped("drop a stale lease"):
            self.r.zrem(keys.r_leases(), keys.lease_member(job_id, index))

    def queue_length(self, queue: str) -> int:
        """Messages waiting in a Celery queue on this Redis (kombu keeps priorities in suffixed
        lists next to the plain one)."""
        names = [queue] + [f"{queue}\x06\x16{p}" for p in (1, 2, 3, 4, 5, 6, 7, 8, 9)]
        with _wrapped(f"measure the {queue} queue"):
            pipe = self.r.pipeline(transaction=False)
            for name in names:
                pipe.llen(name)
            return int(sum(pipe.execute()))

    def bump(self, job_id: str, index: int, counter: str) -> int:
        """Add one to a chunk's counter (transient hand-backs); returns the new count."""
        with _wrapped(f"count {counter}"):
            value: int = self.r.hincrby(keys.r_chunk(job_id, index), counter, 1)
        return value

    def set_chunk_fields(self, job_id: str, index: int, **fields: Any) -> None:
        with _wrapped("update chunk progress"):
            self.r.hset(keys.r_chunk(job_id, index), mapping={k: str(v) for k, v in fields.items()})

    def record_frame(self, job_id: str, frame: int, size_bytes: int, sha256: str) -> None:
        """Record a verified frame, and count renders per frame (more than one is waste)."""
        with _wrapped("record a frame"):
            pipe = self.r.pipeline(transaction=True)
            pipe.hset(keys.r_frames(job_id), str(frame), f"{size_bytes}:{sha256}")
            pipe.hincrby(keys.r_renders(job_id), str(frame), 1)
            pipe.execute()

    def forget_frame(self, job_id: str, frame: int) -> None:
        """Drop a frame's record so the next render of its chunk makes it again."""
        with _wrapped("forget a frame"):
            self.r.hdel(keys.r_frames(job_id), str(frame))

    def render_counts(self, job_id: str) -> dict[int, int]:
        with _wrapped("read render counts"):
            raw: dict[str, str] = self.r.hgetall(keys.r_renders(job_id))
        return {int(k): int(v) for k, v in raw.items()}

    def blame(self, job_id: str, worker: str) -> int:
        """Count a failure of `worker` on this job; returns its count (for the blocklist)."""
        with _wrapped("count a worker failure"):
            count: int = self.r.hincrby(keys.r_blocklist(job_id), worker, 1)
        return count

    def blocked(self, job_id: str) -> dict[str, int]:
        with _wrapped("read the blocklist"):
            raw: dict[str, str] = self.r.hgetall(keys.r_blocklist(job_id))
        return {k: int(v) for k, v in raw.items()}

    def cancel_job(self, job_id: str) -> list[int]:
        """Cancel the job and every unfinished chunk; running workers see it at their next renewal."""
        self.move_job(job_id, JobState.CANCELLED, finished=time.time(), error="cancelled by a user")
        cancelled = []
        for chunk in self.chunks(job_id):
            index = int(chunk["index"])
            if self.move_chunk(job_id, index, ChunkState.CANCELLED).moved:
                self.drop_lease(job_id, index)
                cancelled.append(index)
        return cancelled

    def reopen_job(self, job_id: str, *, every_unfinished: bool) -> list[int]:
        """Back to running: failed chunks (or every unfinished one) queued with a fresh budget.
        Returns the chunks that now wait for work (queued or interrupted)."""
        move = self.move_job(job_id, JobState.RUNNING, error="", finished="")
        if not move.moved:
            raise LedgerError(
                f"job {job_id} is {move.previous}; only failed or cancelled jobs retry"
            )
        reopen = {ChunkState.FAILED}
        if every_unfinished:
            reopen |= {ChunkState.CANCELLED, ChunkState.INTERRUPTED}
        waiting = []
        for chunk in self.chunks(job_id):
            index, state = int(chunk["index"]), chunk.get("state", "")
            if state in reopen:
                self.move_chunk(
                    job_id, index, ChunkState.QUEUED,
                    failures=0, lost_leases=0, interruptions=0, transients=0, error="",
                )  # fmt: skip
            if self.chunk(job_id, index).get("state") in (
                ChunkState.QUEUED,
                ChunkState.INTERRUPTED,
            ):
                waiting.append(index)
        with _wrapped("reset the blocklist"):
            self.r.delete(keys.r_blocklist(job_id))
        return waiting

    def save_measurement(self, key: str, m: Measurement) -> None:
        """What a probe measured, for the next auto-sized job of the same scene and settings."""
        with _wrapped("record a measurement"):
            self.r.hset(
                key,
                mapping={"startup_s": m.startup_s, "frame_s": m.frame_s, "source": m.source},
            )

    def measurement(self, key: str) -> Measurement | None:
        with _wrapped("read a measurement"):
            raw: dict[str, str] = self.r.hgetall(key)
        if not raw:
            return None
        return Measurement(
            startup_s=float(raw["startup_s"]), frame_s=float(raw["frame_s"]), source=raw["source"]
        )

    def frame_records(self, job_id: str) -> dict[int, tuple[int, str]]:
        with _wrapped("read frame records"):
            raw: dict[str, str] = self.r.hgetall(keys.r_frames(job_id))
        records = {}
        for frame, value in raw.items():
            size, _, digest = value.partition(":")
            records[int(frame)] = (int(size), digest)
        return records

    def expired_leases(self, now: float | None = None) -> list[tuple[str, int]]:
        with _wrapped("read leases"):
            members: list[str] = self.r.zrangebyscore(keys.r_leases(), 0, now or time.time())
        return [keys.parse_lease_member(m) for m in members]

    # ── workers and events ────────────────────────────────────────────────────────────────────
    def heartbeat(self, name: str, info: dict[str, Any]) -> None:
        with _wrapped("record a worker heartbeat"):
            self.r.hset(keys.r_workers(), name, json.dumps({**info, "seen": time.time()}))

    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]:
        with _wrapped("list workers"):
            raw: dict[str, str] = self.r.hgetall(keys.r_workers())
        now = time.time()
        alive = {}
        for name, value in raw.items():
            info = json.loads(value)
            if now - float(info.get("seen", 0)) <= max_age_s:
                alive[name] = info
        return alive

    def workers_per_queue(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for info in self.workers().values():
            if info.get("draining"):
                continue
            for queue in info.get("queues", []):
                counts[queue] = counts.get(queue, 0) + 1
        return counts

    def queue_depths(self, limit: int = 1000) -> dict[str, int]:
        """Chunks waiting per queue across unfinished jobs: queued ones wait for render (or, for
        encode jobs, for encode), rendered ones for encode, stitching jobs for stitch."""
        depths = {"render": 0, "encode": 0, "stitch": 0}
        for job_id in self.job_ids(limit):
            job = self.job(job_id)
            state = job.get("state", "")
            if state == JobState.STITCHING:
                depths["stitch"] += 1
            if state not in (JobState.QUEUED, JobState.RUNNING):
                continue
            first_queue = "encode" if job.get("kind") == "encode" else "render"
            for chunk in self.chunks(job_id):
                if chunk.get("state") in (ChunkState.QUEUED, ChunkState.INTERRUPTED):
                    depths[first_queue] += 1
                elif chunk.get("state") == ChunkState.RENDERED:
                    depths["encode"] += 1
        return depths

    def event(self, job_id: str, kind: str, **data: Any) -> None:
        entry = json.dumps({"t": round(time.time(), 3), "event": kind, **data}, default=str)
        with _wrapped("record an event"):
            pipe = self.r.pipeline(transaction=False)
            pipe.rpush(keys.r_events(job_id), entry)
            pipe.ltrim(keys.r_events(job_id), -5000, -1)
            pipe.execute()

    def events(self, job_id: str) -> list[dict[str, Any]]:
        with _wrapped("read events"):
            raw: list[str] = self.r.lrange(keys.r_events(job_id), 0, -1)
        return [json.loads(e) for e in raw]
