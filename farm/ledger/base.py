"""The ledger's footing: its Redis connection and scripts, the moves' answers, and the reads
and the event log that every part of the ledger (farm.ledger) uses."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Self, TypeVar

import redis
from redis.backoff import EqualJitterBackoff
from redis.retry import Retry

from farm.core import keys
from farm.core.errors import LedgerError, UnknownJob, UnreachableError
from farm.core.state import ENDED
from farm.ledger.lua import Scripts

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """What a transition did: `ok` moved it; `same` found it there already (a no-op)."""

    status: str
    previous: str
    token: str = ""
    target: str = ""
    gate: bool = False
    """A move to done asked to (`gate=True`) and won the completion gate: send the stitch."""

    @property
    def moved(self) -> bool:
        return self.status == "ok"


class FrameRecord(NamedTuple):
    """A frame verified in the store, as r_frames keeps it (`size:sha256:writer`): the writer
    (keys.writer) is the claim whose objects are the frame's (keys.frame_key,
    keys.frame_folder), None for a record from before records named one."""

    size_bytes: int
    sha256: str
    writer: str | None = None

    def encode(self) -> str:
        """The record as r_frames keeps it; records_of reads it back."""
        head = f"{self.size_bytes}:{self.sha256}"
        return head if self.writer is None else f"{head}:{self.writer}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """What Ledger.record_frame did: `recorded` false when the chunk is another attempt's now
    (nothing changed); `job_output_bytes`: the job's File Output bytes recorded so far."""

    recorded: bool
    job_output_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A claim (Ledger.claim) and what its attempt reads next, from the same round trip and as
    they were just after it: the job, the chunk's frames and their records. `blocked`: the
    worker's failures on this job when the claim stopped at the blocklist (status 'blocked';
    nothing moved)."""

    move: Move
    job: dict[str, str] = field(default_factory=dict)
    frames: list[int] = field(default_factory=list)
    records: dict[int, FrameRecord] = field(default_factory=dict)
    blocked: int = 0


def records_of(raw: dict[str, str]) -> dict[int, FrameRecord]:
    """Frame records as the ledger keeps them (`size:sha256:writer`, `size:sha256` before), by
    frame."""
    records = {}
    for frame, value in raw.items():
        size, digest, *writer = value.split(":")
        records[int(frame)] = FrameRecord(int(size), digest, writer[0] if writer else None)
    return records


def move_of(result: list[Any]) -> Move:
    return Move(
        status=result[0],
        previous=result[1] or "",
        token=(result[2] or "") if len(result) > 2 else "",
        target=(result[3] or "") if len(result) > 3 else "",
        gate=len(result) > 4 and int(result[4] or 0) == 1,
    )


def claim_of(result: list[Any]) -> Claim:
    """A claim's chunk_move.lua answer: the move, and what it brought back when it took the chunk."""
    move = move_of(result)
    if move.status == "blocked":
        return Claim(move=move, blocked=int(result[2]))
    if not move.moved or len(result) < 8:
        return Claim(move=move)
    return Claim(
        move=move,
        job=json.loads(result[5]),
        frames=json.loads(result[6]),
        records=records_of(json.loads(result[7])),
    )


@contextmanager
def wrapped(what: str) -> Iterator[None]:
    try:
        yield
    except redis.ConnectionError as exc:
        if "certificate" in str(exc).lower():  # a wrong CA or host name is no outage
            raise UnreachableError(
                f"Redis's certificate was refused while trying to {what} ({exc}); set "
                "ssl_ca_certs= in FARM_REDIS_URL to the CA that signed it, and use the name on it"
            ) from exc
        raise UnreachableError(f"Redis does not answer while trying to {what}: {exc}") from exc
    except redis.RedisError as exc:
        raise LedgerError(f"Redis refused to {what}: {exc}") from exc


class LedgerBase:
    """The connection, the registered scripts, and the plain reads of jobs, chunks and events."""

    def __init__(self, client: redis.Redis) -> None:
        # decode_responses=True: every reply is str; redis-py's stubs cannot express that.
        self.r: Any = client
        self.scripts = Scripts.registered(client)
        """Every farm/ledger/scripts/*.lua, registered once and sent by EVALSHA."""
        self._budgeted: set[str] = set()
        """Jobs seen with a budget: their claims price it first, without stopping the script."""
        self.meter: dict[str, str] = {}
        """Fields every claim through this ledger records (a worker's instance type, lifecycle
        and price per second: cost.Instance.claim_fields), so each attempt is priced."""

    @classmethod
    def from_url(cls, url: str, *, ride_out_s: float = 0.0) -> Self:
        """`ride_out_s` > 0 (workers, reconciler): retry through a Redis restart that long, so a
        short outage delays work instead of failing it. The CLI answers at once instead."""
        retries = 0
        if ride_out_s > 0:
            # A capped wait is 1 to 2 s (jittered below): a retry a second of ride-out lasts
            # at least about ride_out_s, at most twice that.
            retries = max(1, int(ride_out_s))
        client = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=10,
            health_check_interval=15,
            # Equal jitter (half to all of each step): workers cut off together do not all
            # come back in the same instant when Redis does.
            retry=Retry(EqualJitterBackoff(cap=2.0, base=0.25), retries),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError] if retries else [],
        )
        return cls(client)

    def ping(self) -> None:
        with wrapped("ping"):
            self.r.ping()

    def call(self, what: str, fn: Callable[[], T]) -> T:
        with wrapped(what):
            return fn()

    def job(self, job_id: str) -> dict[str, str]:
        with wrapped("read the job"):
            data: dict[str, str] = self.r.hgetall(keys.r_job(job_id))
        return data

    def job_or_fail(self, job_id: str) -> dict[str, str]:
        """The job's record; UnknownJob (bad input, CLI exit 2) when there is none."""
        job = self.job(job_id)
        if not job:
            raise UnknownJob(job_id)
        return job

    def chunks(self, job_id: str) -> list[dict[str, str]]:
        total = int(self.job(job_id).get("chunks_total", 0))
        with wrapped("read the chunks"):
            pipe = self.r.pipeline(transaction=False)
            for i in range(total):
                pipe.hgetall(keys.r_chunk(job_id, i))
            result: list[dict[str, str]] = pipe.execute()
        return result

    def chunk(self, job_id: str, index: int) -> dict[str, str]:
        with wrapped("read the chunk"):
            data: dict[str, str] = self.r.hgetall(keys.r_chunk(job_id, index))
        return data

    def job_ids(self, limit: int = 50) -> list[str]:
        """Newest first."""
        with wrapped("list jobs"):
            ids: list[str] = self.r.zrevrange(keys.r_jobs(), 0, limit - 1)
        return ids

    def live_job_ids(self, *, keep_ended: bool = False) -> list[str]:
        """Every job that has not ended, oldest first, however many the farm has had (job_ids
        lists the newest, for people); the ended ones met here leave the set (`keep_ended`:
        they are listed too, and stay until the next call without it)."""
        with wrapped("list live jobs"):
            if not self.r.exists(keys.r_live_jobs_seeded()):
                self._seed_live_jobs()
            ids: list[str] = self.r.zrange(keys.r_live_jobs(), 0, -1)
        if keep_ended:
            return ids
        ended = {
            job_id
            for job_id, (state,) in zip(ids, self.job_fields(ids, "state"), strict=True)
            if not state or state in ENDED
        }
        if ended:
            with wrapped("drop ended jobs"):
                gone = sorted(ended)
                self.scripts.drop_ended(
                    keys=[keys.r_live_jobs(), *(keys.r_job(j) for j in gone)], args=gone
                )
        return [job_id for job_id in ids if job_id not in ended]

    def _seed_live_jobs(self) -> None:
        """The jobs of a farm recorded before the live set: those not ended go in, once."""
        every: list[tuple[str, float]] = self.r.zrange(keys.r_jobs(), 0, -1, withscores=True)
        for at in range(0, len(every), 1000):
            batch = every[at : at + 1000]
            states = self.job_fields([job_id for job_id, _ in batch], "state")
            live = {
                job_id: when
                for (job_id, when), (state,) in zip(batch, states, strict=True)
                if state and state not in ENDED
            }
            if live:
                self.r.zadd(keys.r_live_jobs(), live)
        self.r.set(keys.r_live_jobs_seeded(), "1")

    def job_fields(self, job_ids: list[str], *names: str) -> list[tuple[str, ...]]:
        """`names` of each job, in one round trip ('' where a job has none)."""
        with wrapped("read jobs"):
            pipe = self.r.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hmget(keys.r_job(job_id), list(names))
            found: list[list[str | None]] = pipe.execute()
        return [tuple(v or "" for v in values) for values in found]

    def event(self, job_id: str, kind: str, **data: Any) -> None:
        entry = json.dumps({"t": round(time.time(), 3), "event": kind, **data}, default=str)
        with wrapped("record an event"):
            pipe = self.r.pipeline(transaction=False)
            pipe.rpush(keys.r_events(job_id), entry)
            pipe.ltrim(keys.r_events(job_id), -5000, -1)
            pipe.execute()

    def events(self, job_id: str) -> list[dict[str, Any]]:
        with wrapped("read events"):
            raw: list[str] = self.r.lrange(keys.r_events(job_id), 0, -1)
        return [json.loads(e) for e in raw]
