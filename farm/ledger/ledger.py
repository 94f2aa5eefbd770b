"""The job ledger in Redis: job and chunk state, attempts, leases, timings, events.

Celery only carries messages; this is the record. Every state change is one atomic Lua script,
and every one is idempotent: finishing a chunk twice changes nothing the second time.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterable
from typing import Any

from redis.exceptions import NoScriptError

from farm.core import keys
from farm.core.depends import held
from farm.core.errors import LedgerError
from farm.core.pipeline import running_states, sources_of
from farm.core.state import ChunkState, JobState
from farm.ledger.base import (
    Claim,
    FrameRecord,
    Move,
    Recorded,
    claim_of,
    move_of,
    records_of,
    wrapped,
)
from farm.ledger.fleet import FleetRecords
from farm.ledger.jobs import JobRecords
from farm.ledger.restore import RestoreRecords
from farm.ledger.split import SplitRecords

__all__ = ["Claim", "Ledger", "Move"]
log = logging.getLogger(__name__)


class Ledger(JobRecords, FleetRecords, SplitRecords, RestoreRecords):
    """All of the farm's Redis state goes through here: chunks' moves, claims, leases and frames
    here; jobs (farm.ledger.jobs), the webhook outbox (farm.ledger.outbox), workers and queues
    (farm.ledger.fleet), projects (farm.ledger.projects), splits (farm.ledger.split) in the
    classes it joins."""

    def try_start_stitch(self, job_id: str) -> bool:
        """The completion gate: true for exactly one caller once every chunk is done (the
        script records the event). Workers open it with their last done move (`gate=True`)."""
        with wrapped("open the completion gate"):
            return bool(
                self.scripts.start_stitch(
                    keys=[keys.r_job(job_id), keys.r_events(job_id)], args=[time.time()]
                )
            )

    def stitch_taken(self, job_id: str, worker: str) -> None:
        """The worker running the job's stitch: the reconciler sends the stitch again when that
        worker is gone (its message stays unacknowledged for hours, until the broker's
        visibility timeout, so nothing else would)."""
        with wrapped("record the stitch's worker"):
            self.r.hset(keys.r_job(job_id), mapping={"stitch_worker": worker})

    def stitch_sent_again(self, job_id: str, now: float) -> None:
        """A stitch resent by the reconciler: overdue again only from now, with no worker yet."""
        with wrapped("record the stitch sent again"):
            self.r.hset(keys.r_job(job_id), mapping={"stitch_started": now, "stitch_worker": ""})

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
        return move_of(result)

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
        return claim_of(result)

    def move_then_claim(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        token: str,
        fields: dict[str, Any],
        then: ChunkState,
        then_from: frozenset[ChunkState],
        lease_s: float,
        worker: str,
        block_after: int = 0,
        **claim_fields: Any,
    ) -> tuple[Move, Claim | None]:
        """move_chunk to `target` under `token` and, in the same round trip, `claim` the chunk
        here for its next phase (`then` from `then_from`), checking the same token: it takes
        the chunk only from this attempt's own move. The claim is None where it took nothing
        (a budget to price, the blocklist, a refused move): the caller claims as usual. The
        move is never a last phase's (no completion gate: the chunk has a next phase)."""

        def alone() -> tuple[Move, None]:
            return self.move_chunk(job_id, index, target, token=token, **fields), None

        if job_id in self._budgeted:  # its claims are priced first: no pipeline
            return alone()
        calls = [
            self._chunk_args(job_id, index, target, token=token, lease_s=None, mode="",
                             max_failures=0, only_from=None, flags="", fields=fields, block="",
                             block_after=0),
            self._chunk_args(job_id, index, then, token=token, lease_s=lease_s, mode="claim",
                             max_failures=0, only_from=then_from, flags="r",
                             fields={"worker": worker, **claim_fields},
                             block=worker if block_after > 0 else "", block_after=block_after),
        ]  # fmt: skip

        def send() -> list[Any]:
            pipe = self.r.pipeline(transaction=False)
            for script_keys, args in calls:
                pipe.evalsha(self.scripts.chunk_move.sha, len(script_keys), *script_keys, *args)
            answers: list[Any] = pipe.execute(raise_on_error=False)
            return answers

        with wrapped(f"move chunk {index} of {job_id} to {target} and claim it for {then}"):
            moved, claimed = send()
            if isinstance(moved, NoScriptError):
                # A Redis that lost its scripts (a restart): load it and send the very same calls,
                # so that a pipeline it ran before it restarted, whose answer was lost, is known
                # as itself (its claim answers as it did).
                self.r.script_load(self.scripts.chunk_move.script)
                moved, claimed = send()
            if isinstance(moved, Exception):
                raise moved
        self._announce_failed(job_id, moved)
        if isinstance(claimed, Exception):  # the move stands; the caller claims as usual
            log.warning("chunk %s/%d: the claim for %s failed: %s", job_id, index, then, claimed)
            return move_of(moved), None
        move, claim = move_of(moved), claim_of(claimed)
        if claim.move.moved and claim.move.previous == str(then) and move.status != "same":
            # Both ran before and their answers were lost (the client sent the pipeline again):
            # the claim took the chunk from this very move, which therefore stands.
            move = Move(status="same", previous=str(target), token=token, target=str(target))
        return move, claim if claim.move.moved else None

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
        """chunk_move.lua (farm/ledger/scripts), its raw answer. The first claim of a job with a
        budget stops in the script ('budget'), is priced here (enforce_budget may pause the
        job) and asked again; later ones are priced first. A job without one costs no read."""

        def call() -> list[Any]:
            script_keys, args = self._chunk_args(
                job_id, index, target, token=token, lease_s=lease_s, mode=mode,
                max_failures=max_failures, only_from=only_from, flags=flags, fields=fields,
                block=block, block_after=block_after,
            )  # fmt: skip
            answer: list[Any] = self.scripts.chunk_move(keys=script_keys, args=args)
            return answer

        with wrapped(f"move chunk {index} of {job_id} to {target}"):
            result = call()
            if result[0] == "budget":
                if len(self._budgeted) > 10_000:
                    self._budgeted.clear()
                self._budgeted.add(job_id)
                result = call()  # a budgeted job's claim is priced first, then asked plainly
        self._announce_failed(job_id, result)
        return result

    def _announce_failed(self, job_id: str, result: list[Any]) -> None:
        if result[0] == "ok" and len(result) > 3 and result[3] == ChunkState.FAILED:
            self.announce(job_id, JobState.FAILED)  # the script may have failed the job

    def _chunk_args(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        token: str,
        lease_s: float | None,
        mode: str,
        max_failures: int,
        only_from: frozenset[ChunkState] | None,
        flags: str,
        fields: dict[str, Any],
        block: str,
        block_after: int,
    ) -> tuple[list[str], list[str | int | float]]:
        """chunk_move.lua's keys and arguments (a claim of a budgeted job is priced here first)."""
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
            secrets.token_hex(8),  # also how a call sent again knows its own claim
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
        return script_keys, args

    def renew(self, job_id: str, index: int, token: str, lease_s: float) -> str:
        """'ok', 'lost' (another attempt owns the chunk) or 'cancelled' (stop now)."""
        expiry = time.time() + lease_s
        with wrapped("renew a lease"):
            answer: str = self.scripts.renew(
                keys=[keys.r_chunk(job_id, index), keys.r_leases()],
                args=[token, expiry, keys.lease_member(job_id, index), keys.r_job(job_id)],
            )
        return answer

    def drop_lease(self, job_id: str, index: int, *, expired_by: float | None = None) -> None:
        """`expired_by`: only if the lease still ends by then (the reconciler's, which read it
        expired: the chunk's next claim may have taken a fresh one since)."""
        member = keys.lease_member(job_id, index)
        with wrapped("drop a stale lease"):
            if expired_by is None:
                self.r.zrem(keys.r_leases(), member)
            else:
                self.scripts.drop_expired(keys=[keys.r_leases()], args=[member, expired_by])

    def bump(self, job_id: str, index: int, counter: str) -> int:
        """Add one to a chunk's counter (transient hand-backs); returns the new count."""
        with wrapped(f"count {counter}"):
            value: int = self.r.hincrby(keys.r_chunk(job_id, index), counter, 1)
        return value

    def set_chunk_fields(self, job_id: str, index: int, **fields: Any) -> None:
        with wrapped("update chunk progress"):
            self.r.hset(keys.r_chunk(job_id, index), mapping={k: str(v) for k, v in fields.items()})

    def record_frame(
        self,
        job_id: str,
        frame: int,
        size_bytes: int,
        sha256: str,
        *,
        writer: str | None = None,
        token: str = "",
        output_bytes: int = 0,
        chunk: int | None = None,
        first: bool = False,
        **progress: Any,
    ) -> Recorded:
        """Record a verified frame stored under `writer`'s keys (keys.frame_key), and count
        renders per frame (more than one is waste). `token`: only while the chunk is still this
        attempt's ('' : whoever holds it), so a record always names the winner's objects.
        `output_bytes`: the frame's File Output files, added to the job's. `chunk` and
        `progress`: fields set on that chunk in the same round trip. `first`: an attempt's first
        frame, which sets the job's `first_frame_at` unless an earlier frame did (`farm status`,
        the overhead bench), in the same round trip too."""
        value = FrameRecord(size_bytes, sha256, writer).encode()
        fields = progress if chunk is not None else {}
        with wrapped("record a frame"):
            done, outputs = self.scripts.record_frame(
                keys=[
                    keys.r_chunk(job_id, -1 if chunk is None else chunk),
                    keys.r_frames(job_id),
                    keys.r_renders(job_id),
                    keys.r_job(job_id),
                ],
                args=[
                    token, frame, value, size_bytes, output_bytes, "1" if first else "",
                    round(time.time(), 3), json.dumps({k: str(v) for k, v in fields.items()}),
                ],
            )  # fmt: skip
        return Recorded(recorded=bool(done), job_output_bytes=int(outputs))

    def forget_frame(self, job_id: str, frame: int) -> None:
        """Drop a frame's record so the next render of its chunk makes it again."""
        with wrapped("forget a frame"):
            self.r.hdel(keys.r_frames(job_id), str(frame))

    def render_counts(self, job_id: str) -> dict[int, int]:
        with wrapped("read render counts"):
            raw: dict[str, str] = self.r.hgetall(keys.r_renders(job_id))
        return {int(k): int(v) for k, v in raw.items()}

    def blame(self, job_id: str, worker: str) -> int:
        """Count a failure of `worker` on this job; returns its count (for the blocklist)."""
        with wrapped("count a worker failure"):
            count: int = self.r.hincrby(keys.r_blocklist(job_id), worker, 1)
        return count

    def blocked(self, job_id: str) -> dict[str, int]:
        with wrapped("read the blocklist"):
            raw: dict[str, str] = self.r.hgetall(keys.r_blocklist(job_id))
        return {k: int(v) for k, v in raw.items()}

    def cancel_job(self, job_id: str, reason: str = "cancelled by a user") -> list[int]:
        """Cancel the job and every unfinished chunk; running workers see it at their next renewal.
        `reason`: the job's error (a parent's end cancels its waiting children, farm.control.depends)."""
        self.move_job(job_id, JobState.CANCELLED, finished=time.time(), error=reason)
        cancelled = []
        for chunk in self.chunks(job_id):
            index = int(chunk["index"])
            if self.move_chunk(job_id, index, ChunkState.CANCELLED).moved:
                self.drop_lease(job_id, index)
                cancelled.append(index)
        return cancelled

    def check_reopen(self, job_id: str, *, every_unfinished: bool) -> None:
        """LedgerError when the job may not retry: only a failed or cancelled one does (a paused
        one resumes; a running one would render some chunks with a scene given now and others
        with its own), and a retry must not leave it running with chunks that never end."""
        job = self.job(job_id)
        state = job.get("state", "")
        if state not in (JobState.FAILED, JobState.CANCELLED):
            hints: dict[str, str] = {JobState.PAUSED: f": `farm resume {job_id}` runs it again"}
            if job.get("kind", "render") == "render":
                hints[JobState.RUNNING] = (
                    f"; to render the rest with another scene, `farm cancel {job_id}`, then "
                    f"`farm retry {job_id} --all --scene FIXED.blend`"
                )
            then = hints.get(state, "")
            raise LedgerError(f"job {job_id} is {state}; only failed or cancelled jobs retry{then}")
        if every_unfinished:
            return
        cancelled = [c for c in self.chunks(job_id) if c.get("state") == ChunkState.CANCELLED]
        if cancelled:
            raise LedgerError(
                f"job {job_id} has {len(cancelled)} cancelled chunks, which a retry of its "
                f"failed chunks would leave cancelled: `farm retry {job_id} --all` runs them again"
            )

    def reopen_job(self, job_id: str, *, every_unfinished: bool) -> list[int]:
        """Back to running: failed chunks (or every unfinished one) queued with a fresh budget.
        Returns the chunks that now wait for work (queued or interrupted). A cancelled chunk
        runs again only with `every_unfinished`: without it the job would run with chunks that
        never end, so that retry is refused."""
        self.check_reopen(job_id, every_unfinished=every_unfinished)
        job = self.job(job_id)
        # The time it stood ended is not the job's running time: its elapsed, ETA and pace
        # leave it out, as they do a pause's.
        stood = max(time.time() - float(job.get("finished") or time.time()), 0.0)
        paused = round(float(job.get("paused_s") or 0) + stood, 3)
        # A job cancelled while it waited for its parents waits for them again (control.depends).
        target = JobState.WAITING if held(job) else JobState.RUNNING
        move = self.move_job(
            job_id, target, error="", finished="", paused_s=paused,
            stitch_transients=0, stitch_worker="",  # a stitch that gave up has its tries back
        )  # fmt: skip
        if not move.moved:
            raise LedgerError(
                f"job {job_id} is {move.previous}; only failed or cancelled jobs retry"
            )
        with wrapped("watch the job again"):
            self.r.zadd(keys.r_live_jobs(), {job_id: time.time()})
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
        with wrapped("reset the blocklist"):
            self.r.delete(keys.r_blocklist(job_id))
        return waiting

    def frame_records(
        self, job_id: str, frames: Iterable[int] | None = None
    ) -> dict[int, FrameRecord]:
        """Verified frames by frame; only `frames`, when given."""
        with wrapped("read frame records"):
            if frames is None:
                raw: dict[str, str] = self.r.hgetall(keys.r_frames(job_id))
            else:
                names = [str(f) for f in frames]
                values = self.r.hmget(keys.r_frames(job_id), names) if names else []
                raw = {n: v for n, v in zip(names, values, strict=True) if v is not None}
        return records_of(raw)

    def expired_leases(self, now: float | None = None) -> list[tuple[str, int]]:
        with wrapped("read leases"):
            members: list[str] = self.r.zrangebyscore(keys.r_leases(), 0, now or time.time())
        return [keys.parse_lease_member(m) for m in members]
