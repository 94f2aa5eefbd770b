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
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from farm import cost, keys, notices
from farm import queues as queues_
from farm.chunking import Measurement
from farm.errors import FarmError, LedgerError, UnreachableError
from farm.ledger_lua import CHUNK_MOVE, JOB_MOVE, PLAN_REST, RENEW, SPLIT, START_STITCH
from farm.pipeline import (
    job_sources_of,
    running_states,
    sources_of,
)
from farm.plan import Chunk
from farm.spec import JobSpec
from farm.state import ChunkState, JobState

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A claim (Ledger.claim) and what its attempt reads next, from the same round trip and as
    they were just after it: the job, the chunk's frames and their records. `blocked`: the
    worker's failures on this job when the claim stopped at the blocklist (status 'blocked';
    nothing moved)."""

    move: Move
    job: dict[str, str] = field(default_factory=dict)
    frames: list[int] = field(default_factory=list)
    records: dict[int, tuple[int, str]] = field(default_factory=dict)
    blocked: int = 0


def _records(raw: dict[str, str]) -> dict[int, tuple[int, str]]:
    """Frame records as the ledger keeps them (`size:sha256`), by frame."""
    records = {}
    for frame, value in raw.items():
        size, _, digest = value.partition(":")
        records[int(frame)] = (int(size), digest)
    return records


def _move_of(result: list[Any]) -> Move:
    return Move(
        status=result[0],
        previous=result[1] or "",
        token=(result[2] or "") if len(result) > 2 else "",
        target=(result[3] or "") if len(result) > 3 else "",
        gate=len(result) > 4 and int(result[4] or 0) == 1,
    )


@contextmanager
def _wrapped(what: str) -> Iterator[None]:
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


_FIELD_ONCE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return '' end
if ARGV[2] ~= '' then redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) end
return redis.call('HGET', KEYS[1], ARGV[1]) or ''
"""


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
        self._split = client.register_script(SPLIT)
        self._budgeted: set[str] = set()
        """Jobs seen with a budget: their claims price it first, without stopping the script."""
        self.meter: dict[str, str] = {}
        """Fields every claim through this ledger records (a worker's instance type, lifecycle
        and price per second: cost.Instance.claim_fields), so each attempt is priced."""

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
        source_key: str,
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
            self.announce(job_id, target)  # webhooks; never raises
        return Move(status=status, previous=previous, target=str(target))

    def replace_source(self, job_id: str, source_key: str) -> None:
        """`farm retry --scene`: the job's remaining chunks render the fixed scene."""
        with _wrapped("replace the scene"):
            self.r.hset(keys.r_job(job_id), "source_key", source_key)
        self.event(job_id, "scene-replaced", source_key=source_key)

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
        with _wrapped(f"split chunk {index} of {job_id}"):
            result = self._split(
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
            with _wrapped(f"wake the owner of chunk {index} of {job_id}"):
                self.r.publish(keys.r_wake(owner), f"{job_id} {index}")
        return new

    def wakeups(self, worker: str) -> Any:
        """A subscription to `worker`'s wake channel (redis-py PubSub): `get_message(timeout=)`
        gives {"data": "job_id chunk"} for each of its chunks another worker split."""
        with _wrapped("subscribe to wake-ups"):
            sub = self.r.pubsub(ignore_subscribe_messages=True)
            sub.subscribe(keys.r_wake(worker))
        return sub

    def try_start_stitch(self, job_id: str) -> bool:
        """The completion gate: true for exactly one caller once every chunk is done (the
        script records the event). Workers open it with their last done move (`gate=True`)."""
        with _wrapped("open the completion gate"):
            return bool(
                self._stitch(keys=[keys.r_job(job_id), keys.r_events(job_id)], args=[time.time()])
            )

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
        gate: bool = False,
        **fields: Any,
    ) -> Move:
        """Move a chunk if the pipeline allows it from where it is (narrowed by `only_from`),
        the token matches (when given) and, for a claim, the job still runs. One round trip:
        the event, the attempt's cost and, with `gate`, the completion gate go in the same
        script (Move.gate: this caller won the gate and sends the stitch).

        `mode`: claim (takes a lease; a new try after a fault counts an attempt), fail and
        expire (spend the failure or lost-lease budget), interrupt, handback (transient: no
        budget spent, but the next claim is a new try), or '' for a plain move."""
        result = self._chunk_script(
            job_id, index, target, token=token, lease_s=lease_s, mode=mode,
            max_failures=max_failures, only_from=only_from, flags="g" if gate else "",
            fields=fields,
        )  # fmt: skip
        return _move_of(result)

    def claim(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        only_from: frozenset[ChunkState],
        lease_s: float,
        worker: str,
        block_after: int = 0,
        **fields: Any,
    ) -> Claim:
        """A worker's claim (move_chunk, mode claim) that also brings back, in the same round
        trip, the job, the chunk's frames and their records. `block_after` > 0: stop instead
        (status 'blocked', nothing moved) when `worker` has failed this job that many times, so
        the caller can leave the chunk to a healthier worker (ask again with 0 to take it)."""
        result = self._chunk_script(
            job_id, index, target, lease_s=lease_s, mode="claim", only_from=only_from,
            flags="r", block=worker if block_after > 0 else "", block_after=block_after,
            fields={"worker": worker, **fields},
        )  # fmt: skip
        move = _move_of(result)
        if move.status == "blocked":
            return Claim(move=move, blocked=int(result[2]))
        if not move.moved or len(result) < 8:
            return Claim(move=move)
        return Claim(
            move=move,
            job=json.loads(result[5]),
            frames=json.loads(result[6]),
            records=_records(json.loads(result[7])),
        )

    def _chunk_script(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        token: str = "",
        lease_s: float | None,
        mode: str,
        max_failures: int = 0,
        only_from: frozenset[ChunkState] | None,
        flags: str,
        fields: dict[str, Any],
        block: str = "",
        block_after: int = 0,
    ) -> list[Any]:
        """CHUNK_MOVE (farm/ledger_lua.py), its raw answer. The first claim of a job with a
        budget stops in the script ('budget'), is priced here (enforce_budget may pause the
        job) and asked again; later ones are priced first. A job without one costs no read."""
        now = time.time()
        expiry = "" if lease_s is None else str(now + lease_s)
        if lease_s is not None:
            fields["lease_expires"] = expiry
        if mode == "claim":
            fields = {**self.meter, **fields}
            if job_id in self._budgeted:
                self.enforce_budget(job_id)
            else:
                flags += "b"
        allowed = sources_of(target) if only_from is None else only_from
        if mode in ("fail", "expire") and only_from is None:
            # A failure or lost lease may send a running chunk past its phase's own return
            # state (to FAILED once the budget is spent).
            allowed = allowed | running_states()
        fields_json = json.dumps(fields)
        tail = ", " + fields_json[1:] if fields else "}"
        event = f'"t": {round(now, 3)}, "chunk": {index}{tail}'
        args: list[str | int | float] = [
            str(target),
            ",".join(allowed),
            token,
            keys.lease_member(job_id, index),
            expiry,
            fields_json,
            mode,
            secrets.token_hex(4),
            now,
            max_failures,
            event,  # the script puts {"event": "chunk-<target>", in front
            flags,
            block,
            block_after,
        ]
        script_keys = [
            keys.r_chunk(job_id, index),
            keys.r_job(job_id),
            keys.r_leases(),
            keys.r_cost(job_id),
            keys.r_attempts(job_id),
            keys.r_events(job_id),
            keys.r_blocklist(job_id),
            keys.r_frames(job_id),
        ]
        with _wrapped(f"move chunk {index} of {job_id} to {target}"):
            result: list[Any] = self._move(keys=script_keys, args=args)
            if result[0] == "budget":
                if len(self._budgeted) > 10_000:
                    self._budgeted.clear()
                self._budgeted.add(job_id)
                self.enforce_budget(job_id)
                args[11] = flags.replace("b", "")
                result = self._move(keys=script_keys, args=args)
        if result[0] == "ok" and len(result) > 3 and result[3] == ChunkState.FAILED:
            self.announce(job_id, JobState.FAILED)  # the script may have failed the job
        return result

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

    def broker_messages(self, queues: Iterable[str]) -> list[bytes]:
        """Every message the broker holds for `queues`, waiting or delivered but unacknowledged,
        raw (farm.queues reads them): what the reconciler checks a lost message against."""
        with _wrapped("read the queues"):
            pipe = self.r.pipeline(transaction=False)
            for queue in queues:
                for name in queues_.priority_lists(queue):
                    pipe.lrange(name, 0, -1)
            pipe.hvals(queues_.UNACKED)
            return [raw for batch in pipe.execute() for raw in batch]

    def bump(self, job_id: str, index: int, counter: str) -> int:
        """Add one to a chunk's counter (transient hand-backs); returns the new count."""
        with _wrapped(f"count {counter}"):
            value: int = self.r.hincrby(keys.r_chunk(job_id, index), counter, 1)
        return value

    def bump_job(self, job_id: str, counter: str) -> int:
        """Add one to a job's counter (the stitch's transient retries); returns the new count."""
        with _wrapped(f"count {counter}"):
            value: int = self.r.hincrby(keys.r_job(job_id), counter, 1)
        return value

    def job_field_once(self, job_id: str, field: str, value: str) -> str:
        """The job's `field`, set to `value` first where it has none and `value` is not empty:
        of workers racing to set it, all get the first one's. '' for a job that is gone."""
        with _wrapped(f"set the job's {field}"):
            found = self.r.eval(_FIELD_ONCE, 1, keys.r_job(job_id), field, value)
        return str(found or "")

    def set_chunk_fields(self, job_id: str, index: int, **fields: Any) -> None:
        with _wrapped("update chunk progress"):
            self.r.hset(keys.r_chunk(job_id, index), mapping={k: str(v) for k, v in fields.items()})

    def record_frame(
        self,
        job_id: str,
        frame: int,
        size_bytes: int,
        sha256: str,
        *,
        chunk: int | None = None,
        **progress: Any,
    ) -> None:
        """Record a verified frame, and count renders per frame (more than one is waste).
        `chunk` and `progress`: fields set on that chunk in the same round trip."""
        with _wrapped("record a frame"):
            pipe = self.r.pipeline(transaction=True)
            pipe.hset(keys.r_frames(job_id), str(frame), f"{size_bytes}:{sha256}")
            pipe.hincrby(keys.r_renders(job_id), str(frame), 1)
            pipe.hincrby(keys.r_job(job_id), "frame_bytes", size_bytes)  # bytes moved (census)
            if chunk is not None and progress:
                pipe.hset(
                    keys.r_chunk(job_id, chunk), mapping={k: str(v) for k, v in progress.items()}
                )
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

    # ── cost, budget, pause, priority ─────────────────────────────────────────────────────────
    def cost_record(self, job_id: str) -> dict[str, str]:
        """The job's metered cost hash (see cost.job_cost)."""
        with _wrapped("read the job's cost"):
            raw: dict[str, str] = self.r.hgetall(keys.r_cost(job_id))
        return raw

    def attempt_records(self, job_id: str) -> list[dict[str, Any]]:
        """One record per ended attempt: chunk, phase, seconds, dollars, instance, how it ended."""
        with _wrapped("read attempt records"):
            raw: list[str] = self.r.lrange(keys.r_attempts(job_id), 0, -1)
        return [json.loads(e) for e in raw]

    def frames_done(self, job_id: str, job: dict[str, str] | None = None) -> int:
        """Frames kept so far: verified frames of a render job, else done chunks' share."""
        job = job if job is not None else self.job(job_id)
        with _wrapped("count frames"):
            frames = int(self.r.hlen(keys.r_frames(job_id)))
        total, chunks = int(job.get("frames_total", 0)), int(job.get("chunks_total", 0) or 0)
        by_chunks = int(job.get("chunks_done", 0)) * total // chunks if chunks else 0
        return min(max(frames, by_chunks), total)

    def spend(self, job_id: str, job: dict[str, str] | None = None) -> cost.Spend:
        job = job if job is not None else self.job(job_id)
        return cost.spend_of(
            job, cost.job_cost(self.cost_record(job_id)), self.frames_done(job_id, job)
        )

    def enforce_budget(self, job_id: str) -> bool:
        """Before a claim: pause the job (true) when spent plus expected to finish would pass
        its budget, so the claim is refused and no new chunk starts."""
        with _wrapped("read the job's budget"):
            max_cost, state = self.r.hmget(keys.r_job(job_id), "max_cost", "state")
        if float(max_cost or 0) <= 0 or state not in (JobState.QUEUED, JobState.RUNNING):
            return False  # one read per claim for jobs without a budget
        spend = self.spend(job_id)
        if not spend.over_budget:
            return False
        return self.pause_job(job_id, reason=spend.budget_reason).moved

    def pause_job(self, job_id: str, reason: str) -> Move:
        """No new chunk starts; running ones finish (their leases renew), frames are kept."""
        return self.move_job(job_id, JobState.PAUSED, paused_reason=reason, paused=time.time())

    def resume_job(self, job_id: str, max_cost: float | None = None) -> Move:
        fields: dict[str, Any] = {"paused_reason": "", "paused": ""}
        if max_cost is not None:
            fields["max_cost"] = max_cost
        return self.move_job(job_id, JobState.RUNNING, **fields)

    def priority(self, job_id: str) -> int:
        """The job's priority, 0..100, higher first (50 when unset or unknown)."""
        with _wrapped("read the job's priority"):
            value = self.r.hget(keys.r_job(job_id), "priority")
        return int(value) if value else 50

    def set_priority(self, job_id: str, priority: int) -> None:
        with _wrapped("set the job's priority"):
            self.r.hset(keys.r_job(job_id), "priority", priority)
        self.event(job_id, "priority", priority=priority)

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

    def frame_records(
        self, job_id: str, frames: Iterable[int] | None = None
    ) -> dict[int, tuple[int, str]]:
        """Verified frames: (size, sha256) by frame; only `frames`, when given."""
        with _wrapped("read frame records"):
            if frames is None:
                raw: dict[str, str] = self.r.hgetall(keys.r_frames(job_id))
            else:
                names = [str(f) for f in frames]
                values = self.r.hmget(keys.r_frames(job_id), names) if names else []
                raw = {n: v for n, v in zip(names, values, strict=True) if v is not None}
        return _records(raw)

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

    def worker_info(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The last heartbeat of each named worker that has one."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        with _wrapped("read worker heartbeats"):
            raw: list[str | None] = self.r.hmget(keys.r_workers(), wanted)
        return {name: json.loads(value) for name, value in zip(wanted, raw, strict=True) if value}

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

    def job_records(
        self, limit: int = 1000
    ) -> list[tuple[dict[str, str], list[dict[str, str]], dict[str, str]]]:
        """The newest `limit` jobs, each with its chunks and its cost hash, in three round trips
        however many there are (the exporter reads this on every scrape)."""
        ids = self.job_ids(limit)
        with _wrapped("read the jobs"):
            pipe = self.r.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(keys.r_job(job_id))
                pipe.hgetall(keys.r_cost(job_id))
            flat: list[dict[str, str]] = pipe.execute()
            jobs, costs = flat[0::2], flat[1::2]
            pipe = self.r.pipeline(transaction=False)
            counts = [int(job.get("chunks_total") or 0) for job in jobs]
            for job_id, count in zip(ids, counts, strict=True):
                for i in range(count):
                    pipe.hgetall(keys.r_chunk(job_id, i))
            chunks: list[dict[str, str]] = pipe.execute()
        records, at = [], 0
        for job, cost_hash, count in zip(jobs, costs, counts, strict=True):
            records.append((job, chunks[at : at + count], cost_hash))
            at += count
        return records

    # ── webhook outbox: put in by whoever moves a job, drained by farm.webhooks ─────────────────
    def announce(self, job_id: str, state: str) -> bool:
        """Put the job's arrival in `state` in the outbox, once per arrival (a job failed again
        after a retry is a new one: its `finished` or `paused` time differs). Never raises: a
        worker must not wait on, or fail because of, anyone's webhook. True when put in."""
        if str(state) not in notices.JOB_EVENTS:
            return False
        try:
            job = self.job(job_id)
            event = notices.event_for(str(state), job)
            if job.get("state") != str(state) or event is None:
                return False
            stamp = job.get(notices.STAMP_FIELDS.get(str(state), "finished")) or ""
            notice = notices.Notice(
                id=secrets.token_hex(8), job_id=job_id, event=event, t=time.time()
            )
            with _wrapped("put a webhook notice in the outbox"):
                put = self.r.register_script(notices.PUSH)(
                    keys=[keys.r_notice_once(job_id, event, stamp), keys.r_outbox()],
                    args=[notice.to_member(), notice.t, notices.ONCE_TTL_S],
                )
            return bool(put)
        except FarmError as exc:
            log.warning("job %s: webhook notice not recorded: %s", job_id, exc)
            return False

    def claim_notices(self, *, hold_s: float = 120.0, limit: int = 20) -> list[str]:
        """Due notices (raw members), held for `hold_s` against other senders."""
        now = time.time()
        with _wrapped("claim webhook notices"):
            members: list[str] = self.r.register_script(notices.CLAIM)(
                keys=[keys.r_outbox()], args=[now, now + hold_s, limit]
            )
        return members

    def replace_notice(self, member: str, later: list[tuple[notices.Notice, float]]) -> None:
        """Swap a claimed notice for others (its fan-out, or its next try), each due then."""
        with _wrapped("update the webhook outbox"):
            pipe = self.r.pipeline(transaction=True)
            pipe.zrem(keys.r_outbox(), member)
            for notice, due in later:
                pipe.zadd(keys.r_outbox(), {notice.to_member(): due})
            pipe.execute()

    def pending_notices(self) -> list[tuple[notices.Notice, float]]:
        with _wrapped("read the webhook outbox"):
            raw = self.r.zrange(keys.r_outbox(), 0, -1, withscores=True)
        return [(notices.Notice.from_member(m), float(score)) for m, score in raw]

    def set_notify_url(self, job_id: str, url: str) -> None:
        """`farm submit --notify URL`: the job's events go there too (read when each is sent)."""
        with _wrapped("record the job's webhook"):
            self.r.hset(keys.r_job(job_id), "notify_url", url)

    def mark_first(self, job_id: str, **at: float) -> None:
        """When the job's first frame (and its thumbnail) reached the store: each field is set
        once, by whichever chunk gets there first (`farm status`, the overhead bench)."""
        with _wrapped("record the job's first frame"):
            pipe = self.r.pipeline(transaction=False)
            for name, when in at.items():
                pipe.hsetnx(keys.r_job(job_id), name, round(when, 3))
            pipe.execute()
