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

from farm import keys
from farm.errors import LedgerError, UnreachableError
from farm.ledger_lua import CHUNK_MOVE, JOB_MOVE, RENEW, START_STITCH
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
        self.r = client
        self._move = client.register_script(CHUNK_MOVE)
        self._renew = client.register_script(RENEW)
        self._stitch = client.register_script(START_STITCH)
        self._job_move = client.register_script(JOB_MOVE)

    @classmethod
    def from_url(cls, url: str) -> Ledger:
        client = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=10,
            health_check_interval=15,
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
        self, *, job_id: str, spec: JobSpec, chunks: Iterable[Chunk], scene_key: str
    ) -> None:
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
        **fields: Any,
    ) -> Move:
        now = time.time()
        expiry = "" if lease_s is None else str(now + lease_s)
        if lease_s is not None:
            fields["lease_expires"] = expiry
        sources = ",".join(
            sources_of(target)
            | ({ChunkState.RENDERING, ChunkState.ENCODING} if mode == "fail" else set())
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

    def set_chunk_fields(self, job_id: str, index: int, **fields: Any) -> None:
        with _wrapped("update chunk progress"):
            self.r.hset(keys.r_chunk(job_id, index), mapping={k: str(v) for k, v in fields.items()})

    def record_frame(self, job_id: str, frame: int, size_bytes: int, sha256: str) -> None:
        with _wrapped("record a frame"):
            self.r.hset(keys.r_frames(job_id), str(frame), f"{size_bytes}:{sha256}")

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
