"""One chunk attempt, the same for every phase: claim, lease, workspace, run the child, upload its
log, verify, write the manifest, record, hand off. A phase (workers/phases/render.py, segment.py,
transcode.py) supplies only its command line, its checks and its manifest fields. The failure
policy around it is workers.attempt.policy's.

The claim travels as a value, from `claim` to `run_attempt` and to the policy's error handling,
never re-read from Redis: an error handler must only ever move the chunk it claimed, not a newer
attempt's.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from farm.adapters.proc import Result, Running, run
from farm.adapters.sandbox import Box, unwrapped_returncode, wrap
from farm.adapters.store import sha256_file
from farm.core import keys
from farm.core.errors import ChunkInterrupted, LeaseLost, PermanentError
from farm.core.pipeline import PhaseSpec
from farm.core.spec import JobSpec
from farm.ledger import Claim, FrameRecord
from workers.attempt.context import WorkerContext
from workers.attempt.lease import LeaseKeeper
from workers.attempt.logcap import kept_log
from workers.attempt.ports import AttemptLedger
from workers.host import alongside
from workers.host.alongside import LaneRun

log = logging.getLogger(__name__)
_STOP_SIGNALS = (-signal.SIGTERM, -signal.SIGKILL, -signal.SIGINT)


LEASE_MARGIN_S = 5.0
"""How long before its lease could have expired an attempt stops writing (the clock between this
worker and Redis, a slow upload after the check)."""


def attempt_number(token: str) -> int:
    """Tokens are `ATTEMPT:CLAIMS-NONCE`; the attempt counts tries of the chunk."""
    return int(token.split(":", 1)[0])


def claim_number(token: str) -> int:
    """The claim a token was issued by: unique within the chunk, never reset (a retry of the
    job starts the attempt count again)."""
    return int(token.split(":", 1)[1].split("-", 1)[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a phase's work produced: ledger fields for the done move, the manifest to write last
    (None: the phase keeps no manifest), and a small summary for the task's result."""

    fields: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ended:
    """How an attempt ended without raising: the task's small result (what Celery keeps) and the
    next phase's claim its done move made (run_attempt's `then`; None where it took none)."""

    result: dict[str, object]
    next_claim: Claim | None = None


class ChunkAttempt:
    """A claimed chunk under its lease: the phase's work runs inside `with attempt.keeper`."""

    def __init__(
        self,
        ctx: WorkerContext,
        job: dict[str, str],
        index: int,
        phase: PhaseSpec,
        token: str,
        *,
        frames: list[int] | None = None,
        records: dict[int, FrameRecord] | None = None,
    ) -> None:
        """`frames`, `records`: the chunk's frames and their records as the claim brought them
        back (Ledger.claim); read from the ledger when not given."""
        self.ctx = ctx
        self.ledger: AttemptLedger = ctx.ledger
        self.job = job
        self._frames = frames
        self._records = records
        self.job_id = job["id"]
        self.index = index
        self.phase = phase
        self.token = token
        self.number = attempt_number(token)
        self.keeper = LeaseKeeper(
            self.ledger,
            job_id=self.job_id,
            chunk=index,
            token=token,
            lease_s=ctx.settings.lease_s,
            renew_s=ctx.settings.lease_renew_s,
            running=Running(),
            wakeups=ctx.wakeups,
        )
        self.workspace = ctx.job_dir(self.job_id) / f"{phase.phase}-{index:05d}"
        self.log_path = self.workspace / f"{phase.log_name}.log"
        self.claim = claim_number(token)
        self.log_key = keys.log_key(self.job_id, index, self.number, phase.log_name, self.claim)
        self._uploads: list[Future[None]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._log_lock = threading.Lock()

    def segment_key(self, ext: str) -> str:
        """Where this claim's segment goes (keys.segment_key); its manifest names it."""
        return keys.segment_key(self.job_id, self.index, self.claim, ext)

    @cached_property
    def spec(self) -> JobSpec:
        return JobSpec.from_json(json.loads(self.job["spec"]))

    @cached_property
    def frames(self) -> list[int]:
        if self._frames is not None:
            return self._frames
        frames: list[int] = json.loads(self.ledger.chunk(self.job_id, self.index)["frames"])
        return frames

    @cached_property
    def records(self) -> dict[int, FrameRecord]:
        """The verified records of this chunk's frames: (size, sha256) by frame."""
        if self._records is not None:
            return self._records
        return self.ledger.frame_records(self.job_id, self.frames)

    def fresh_workspace(self) -> Path:
        shutil.rmtree(self.workspace, ignore_errors=True)
        self.workspace.mkdir(parents=True)
        return self.workspace

    def check_lease(self, when: str) -> None:
        """Never write over a newer attempt's work: stop once the lease is gone, or may be (not
        renewed for nearly its length: the ledger unreachable from here, where the reconciler
        may have handed the chunk to another worker)."""
        if self.keeper.lost:
            raise LeaseLost(f"chunk {self.index}: lease {self.keeper.lost} {when}")
        unheard = self.keeper.unheard_s()
        if unheard > self.keeper.lease_s - min(LEASE_MARGIN_S, self.keeper.lease_s / 6):
            raise LeaseLost(f"chunk {self.index}: lease not renewed for {unheard:.0f} s {when}; "
                            "another worker may own the chunk now")  # fmt: skip

    def upload_log(self, redact: str = "") -> None:
        """The log as far as the child wrote it, within the cap (workers.attempt.logcap), under
        this claim's key. One at a time: the lease keeper's periodic upload must not land after
        the final one."""
        with self._log_lock:
            if not self.log_path.exists():  # the child has not opened it yet
                return
            body = kept_log(self.log_path, self.ctx.settings.log_max_bytes)
            if redact:
                body = body.replace(redact.encode(), b"<master URL>")
            self.ctx.store.put_bytes(self.log_key, body, "text/plain; charset=utf-8")

    def upload_log_soon(self, redact: str = "") -> None:
        """Upload the log in the background, beside what the phase does next (a probe, the
        segment's upload); `settle` waits for it before the result is recorded."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-upload")
        self._uploads.append(self._pool.submit(self.upload_log, redact))

    def settle(self, *, quiet: bool = False) -> None:
        """Wait for the background uploads; raise the first that failed (`quiet`: log it, for
        an attempt that already failed)."""
        uploads, self._uploads = self._uploads, []
        errors = [exc for exc in (u.exception() for u in uploads) if exc is not None]
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if errors and quiet:
            log.warning("chunk %s/%d: log upload failed: %s", self.job_id, self.index, errors[0])
        elif errors:
            raise errors[0]

    def run_child(
        self,
        argv: list[str],
        *,
        what: str,
        on_line: Callable[[str], None] | None = None,
        memory_limit_bytes: int = 0,
        redact: str = "",
        failed_at: Callable[[], str] = str,
        box: Box | None = None,
        runner: Callable[..., Result] = run,
    ) -> Result:
        """Run the phase's program under the lease, keep its log in the store, and raise what
        its end means for the chunk: lost lease, interruption, or a failure with its log tail.
        `redact`: a secret (a presigned URL) kept out of the log and the error; `box`: run the
        program inside it (farm.adapters.sandbox), for untrusted input such as a scene; `runner`: what
        runs it (farm.adapters.proc.run's arguments and result; workers.host.warm hands it to a running
        Blender)."""
        self.settle()  # a second child writes the same log: the last upload of it ends first
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.keeper.upload_log = lambda: self.upload_log(redact)
        try:
            result = runner(
                wrap(argv, box) if box is not None else argv,
                on_line=on_line,
                log_path=self.log_path,
                handle=self.keeper.running,
                memory_limit_bytes=memory_limit_bytes,
            )
        finally:
            self.keeper.upload_log = None
        self.upload_log_soon(redact)
        self.check_lease(f"while {what} ran")
        if self.keeper.running.handler_failed:  # ours, so counted: it may fail every time
            why = self.keeper.running.handler_failed
            why = why.replace(redact, "<master URL>") if redact else why
            raise PermanentError(f"{what} was stopped: reading its output failed ({why})")
        if self.keeper.stopped_for:
            raise ChunkInterrupted(f"chunk {self.index}: {self.keeper.stopped_for}")
        code = result.returncode if box is None else unwrapped_returncode(result.returncode)
        stopped = code in _STOP_SIGNALS
        if not result.ok and stopped and (self.ctx.drain.active.is_set() or result.stopped):
            # Stopped because the worker is going away, not a crash of the scene or the encode.
            raise ChunkInterrupted(f"chunk {self.index}: {what} was stopped (signal {-code})")
        if not result.ok:
            # A SIGKILL nobody here sent is the kernel's OOM killer: a failure of the work, with
            # a budget, never an interruption that could loop forever.
            how = (
                f"crashed ({signal.Signals(-code).name})"
                if code < 0
                else f"exited with code {code}"
            )
            tail = "\n".join(result.tail[-25:])
            if redact:
                tail = tail.replace(redact, "<master URL>")
            raise PermanentError(f"{what} {how}{failed_at()}:\n{tail}")
        return result


Work = Callable[[ChunkAttempt], Outcome]


def claim(
    ctx: WorkerContext,
    job_id: str,
    index: int,
    phase: PhaseSpec,
    *,
    block_after: int = 0,
    lane: LaneRun | None = None,
) -> Claim:
    """Claim the chunk for `phase`; the claim also brings back the job, the chunk's frames and
    their records. `block_after` > 0: a worker that failed the job that many times claims
    nothing (status 'blocked', Claim.blocked its failures: the caller decides; see
    Ledger.claim). `lane`: an attempt in the encode lane claims at the lane's price."""
    ledger: AttemptLedger = ctx.ledger
    return ledger.claim(
        job_id, index, phase.running, only_from=phase.claim_from, lease_s=ctx.settings.lease_s,
        worker=ctx.name, block_after=block_after, phase=str(phase.phase),
        **_lane_claim(ledger, lane),
    )  # fmt: skip


def _lane_claim(ledger: AttemptLedger, lane: LaneRun | None) -> dict[str, str]:
    """What a claim records over the worker's meter: in the lane, its price (workers.host.alongside)."""
    return {} if lane is None else alongside.claim_fields(ledger.meter)


def unclaimed(job_id: str, index: int, phase: PhaseSpec, claimed: Claim) -> dict[str, object]:
    """The task's result for a claim that took nothing: the chunk is not this worker's to run."""
    if claimed.move.status == "missing":
        return {"skipped": "unknown job"}
    log.info("chunk %s/%d not claimed for %s (%s, was %s)", job_id, index, phase.phase,
             claimed.move.status, claimed.move.previous)  # fmt: skip
    return {"skipped": f"chunk is {claimed.move.previous}"}


def run_attempt(
    ctx: WorkerContext,
    job_id: str,
    index: int,
    phase: PhaseSpec,
    work: Work,
    *,
    claimed: Claim,
    send_next: bool = True,
    block_after: int = 0,
    then: PhaseSpec | None = None,
    lane: LaneRun | None = None,
) -> Ended:
    """Run `work` under the lease of `claimed` (a claim that took the chunk: `claim`, or the
    done move of the phase before), write its manifest last, record the chunk done for this
    phase and hand it on (`send_next` false: the caller runs the next phase itself). Raises what
    the work raised (workers.attempt.policy turns it into the ledger move the failure policy
    asks for). `then`: the next phase, which the caller runs here: the done move claims the
    chunk for it in the same round trip (not on a draining worker; `block_after` as `claim`'s),
    and Ended.next_claim holds that claim. `lane`: an attempt in the encode lane; its done move
    records its seconds alone (workers.host.alongside).

    Ledger round trips of a clean attempt: the claim (which also brought back the job, the
    chunk's frames and their records; none where the phase before claimed it), the lease
    renewals, and the done move (with the completion gate after the last phase, or the next
    phase's claim with `then`)."""
    ledger: AttemptLedger = ctx.ledger
    token = claimed.move.token
    attempt = ChunkAttempt(ctx, claimed.job, index, phase, token, frames=claimed.frames,
                           records=claimed.records)  # fmt: skip
    try:
        # The lease covers the whole attempt, downloads and uploads included: a slow store must
        # not let the reconciler hand the chunk to another worker.
        with attempt.keeper:
            outcome = work(attempt)
            attempt.settle()  # the log is in the store before the chunk is recorded
            attempt.check_lease("before the result was recorded")
            if outcome.manifest is not None:
                # Under this claim's own name, which the done move records on the chunk: a stale
                # attempt's late manifest lands beside the winner's, never over it.
                manifest = keys.manifest_key(job_id, index, keys.writer(index, attempt.claim))
                ctx.store.put_json(manifest, outcome.manifest)
                outcome = replace(outcome, fields={**outcome.fields, "manifest": manifest})
    finally:
        attempt.settle(quiet=True)  # a failed attempt's log too, before its workspace goes
        shutil.rmtree(attempt.workspace, ignore_errors=True)
    # After the last phase the same script tries the completion gate (one stitch per job).
    next_claim: Claim | None = None
    # The phase is done: an outage it rode out is not held against the next (policy.MAX_TRANSIENT).
    fields = {**alongside.end_fields(lane), **outcome.fields, "transients": 0}
    if then is not None and not ctx.drain.active.is_set():
        move, next_claim = ledger.move_then_claim(
            job_id, index, phase.done, token=token, fields=fields,
            then=then.running, then_from=then.claim_from, lease_s=ctx.settings.lease_s,
            worker=ctx.name, block_after=block_after, phase=str(then.phase),
            **_lane_claim(ledger, lane),
        )  # fmt: skip
    else:
        move = ledger.move_chunk(
            job_id, index, phase.done, token=token, gate=phase.next is None, **fields
        )
    if move.status not in ("ok", "same"):  # 'same': a retried call already recorded it
        raise LeaseLost(f"chunk {index}: could not record the {phase.phase} ({move.status})")
    if phase.next is None:
        if move.gate:
            ctx.dispatch.stitch(job_id)
    elif send_next:
        ctx.dispatch.send(phase.next, job_id, index)
    return Ended(
        result={"job_id": job_id, "chunk": index, "done": True, **outcome.summary},
        next_claim=next_claim,
    )


def segment_manifest(
    attempt: ChunkAttempt,
    *,
    frames: Any,
    frame_count: int,
    segment: Path,
    info: dict[str, Any],
    encoder: dict[str, Any],
    etag: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """The manifest of a video segment, the same for render and transcode jobs: what the stitch
    checks each segment against. `info`: what ffprobe said of the segment; `etag`: the stored
    object's, so a stitch that copies it in the store copies these very bytes."""
    return {
        "job_id": attempt.job_id,
        "chunk": attempt.index,
        "attempt": attempt.number,
        "worker": attempt.ctx.name,
        "frames": frames,
        "frame_count": frame_count,
        **extra,
        "segment": {
            "key": attempt.segment_key(segment.suffix.lstrip(".")),
            "size": segment.stat().st_size,
            "sha256": sha256_file(segment),
            **({"etag": etag} if etag else {}),
            **info,
        },
        "encoder": encoder,
    }
