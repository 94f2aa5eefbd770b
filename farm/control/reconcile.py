"""The reconciler: takes back chunks whose lease expired, is the completion gate's backstop,
aborts the early uploads of jobs that failed or were cancelled once they have been kept long
enough, pauses the jobs of a project that used its quota up, and releases (or cancels) the jobs
that wait for others.

Safe to run as several copies or to restart at any time: every move it makes is a ledger
transition that only one caller can win.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from farm.control.depends import settle
from farm.control.hold import settle_holds
from farm.control.projects import Projects
from farm.control.rebuild import (
    MarkWatch,
    Rebuilt,
    keep_spend,
    read_control,
    rebuild,
    record_control,
)
from farm.core import keys
from farm.core.errors import FarmError
from farm.core.pipeline import STITCH, Queue, kind_of, running_in, waiting_for
from farm.core.queues import Work, queued_work
from farm.core.spec import JobSpec
from farm.core.state import JobState
from farm.dispatch import Dispatcher
from farm.ledger import EARLY_UPLOAD
from farm.ledger.ports import ReconcilerLedger

if TYPE_CHECKING:
    from farm.adapters.store import Store

log = logging.getLogger(__name__)

SPEND_KEEP_S = 60.0
"""How often the reconciler copies live jobs' spend into the store (farm.control.rebuild): a
ledger rebuilt from the store counts a job's budget on from at most this long ago."""

UPLOAD_SWEEP_S = 600.0
"""How often the reconciler looks for early uploads to abort: they are kept for hours."""

QUOTA_CHECK_S = 5.0
"""How often the reconciler holds projects with a quota against their use (a sum over each such
project's jobs): a project may pass its quota by what its workers run in that time, and by the
chunks running when it is reached, which finish."""


@dataclass(slots=True)
class Pass:
    """What one reconcile pass did."""

    requeued: list[tuple[str, int]] = field(default_factory=list)
    failed: list[tuple[str, int]] = field(default_factory=list)
    stitched: list[str] = field(default_factory=list)
    resent: list[tuple[str, int]] = field(default_factory=list)
    """Work whose message was lost, sent again (chunk -1: the stitch)."""
    aborted: list[str] = field(default_factory=list)
    """Jobs that failed or were cancelled whose early upload (and the parts in it) was dropped."""
    rebuilt: list[str] = field(default_factory=list)
    """Jobs the ledger had lost, put back from the store (farm.control.rebuild)."""
    ended: list[str] = field(default_factory=list)
    """Jobs that failed or were cancelled, their end kept in the store."""
    paused: dict[str, str] = field(default_factory=dict)
    """Jobs paused because their project used its quota up, with why."""
    released: list[str] = field(default_factory=list)
    """Waiting jobs whose parents are done (or ended, `--after-any`), queued and sent."""
    chain_cancelled: dict[str, str] = field(default_factory=dict)
    """Waiting jobs cancelled because a parent failed or was cancelled, with why."""
    held: list[str] = field(default_factory=list)
    """Jobs with `--hold` whose preview frames are done, moved to held (farm.control.preview)."""


class Reconciler:
    def __init__(
        self,
        ledger: ReconcilerLedger,
        dispatch: Dispatcher,
        *,
        max_lost_leases: int,
        orphan_after_s: float = 60.0,
        stitch_orphan_after_s: float = 900.0,
        store: Store | None = None,
        early_upload_keep_s: float = 24 * 3600.0,
        worker_gone_s: float = 120.0,
    ) -> None:
        self.ledger = ledger
        self.dispatch = dispatch
        self.store = store
        self.early_upload_keep_s = early_upload_keep_s
        self.max_lost_leases = max_lost_leases
        self.orphan_after_s = orphan_after_s
        self.stitch_orphan_after_s = stitch_orphan_after_s
        self.worker_gone_s = worker_gone_s
        """A worker not heard from for this long is gone (it beats every 5 s, by its own clock:
        the margin covers a clock that is off by a minute)."""
        self._next_orphan_sweep = 0.0
        self._next_upload_sweep = 0.0
        self._next_spend_keep = 0.0
        self._next_quota_check = 0.0
        self._kept_spend: dict[str, dict[str, str]] = {}
        self.watch = None if store is None else MarkWatch(ledger, store, lambda: self.rebuild(None))

    def rebuild(self, result: Pass | None) -> Rebuilt:
        """Every job in the store the ledger lost, put back and its waiting chunks sent."""
        assert self.store is not None
        # Projects first: the jobs' messages sent below go to their projects' queues.
        for name in Projects(self.ledger, self.store).restore():
            log.warning("rebuild: project %s put back from the store", name)
        rebuilt = rebuild(self.ledger, self.store, self.dispatch)
        for line in rebuilt.lines():
            log.warning("rebuild: %s", line)
        if result is not None:
            result.rebuilt += [f.job_id for f in rebuilt.of("rebuilt")]
        return rebuilt

    def check_ledger(self, result: Pass) -> None:
        """The ledger lost writes (its mark gone or behind the store's copy): rebuild it first."""
        if self.watch is None:
            return
        rebuilt = self.watch.check()
        if rebuilt is not None:
            result.rebuilt += [f.job_id for f in rebuilt.of("rebuilt")]

    def keep_spend(self, result: Pass) -> None:
        """Live jobs' spend, copied into the store where it changed (farm.control.rebuild)."""
        if self.store is None:
            return
        live = self.ledger.live_job_ids()
        keep_spend(self.ledger, self.store, live, self._kept_spend)
        self._kept_spend = {j: c for j, c in self._kept_spend.items() if j in set(live)}

    def record_ended(self, result: Pass) -> None:
        """A job that failed or was cancelled has its end kept in the store, so a ledger rebuilt
        from the store leaves it ended (a done job's output says so itself). Each is met here once:
        live_job_ids drops it as it meets it, in the step after this one."""
        if self.store is None:
            return
        ids = self.ledger.live_job_ids(keep_ended=True)
        for job_id, (state, error) in zip(
            ids, self.ledger.job_fields(ids, "state", "error"), strict=True
        ):
            if state in (JobState.FAILED, JobState.CANCELLED):
                if read_control(self.store, job_id).get("state") != state:
                    cost = self.ledger.cost_record(job_id)  # a retry counts on from it
                    record_control(self.store, job_id, state=state, error=error, cost=cost)
                result.ended.append(job_id)

    def expire_leases(self, result: Pass, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for job_id, index in self.ledger.expired_leases(now):
            chunk = self.ledger.chunk(job_id, index)
            state = chunk.get("state", "")
            phase = running_in(kind_of(self.ledger.job(job_id)), state)
            if phase is None:
                # Finished or cancelled meanwhile; the lease entry is stale (unless the chunk's
                # next phase claimed it since, with a lease of its own).
                self.ledger.drop_lease(job_id, index, expired_by=now)
                continue
            move = self.ledger.move_chunk(
                job_id,
                index,
                phase.on_lost,
                token=chunk.get("token", ""),
                only_from=frozenset({phase.running}),
                mode="expire",
                max_failures=self.max_lost_leases,
                error=f"lease expired: worker {chunk.get('worker', '?')} stopped answering "
                f"during {state}",
            )
            if not move.moved:
                continue
            if move.target == str(phase.on_lost):
                log.warning(
                    "chunk %s/%d: lease of %s expired; requeued", job_id, index, chunk.get("worker")
                )
                self.dispatch.send(phase.phase, job_id, index)
                result.requeued.append((job_id, index))
            else:
                result.failed.append((job_id, index))

    def open_gates(self, result: Pass) -> None:
        """A worker that died between finishing the last chunk and sending the stitch is covered here."""
        for job_id in self.ledger.live_job_ids():
            job = self.ledger.job(job_id)
            complete = job.get("chunks_done") == job.get("chunks_total")
            if (
                job.get("state") == JobState.RUNNING
                and complete
                and self.ledger.try_start_stitch(job_id)
            ):
                self.dispatch.stitch(job_id)
                result.stitched.append(job_id)

    def resend_orphans(self, result: Pass, now: float | None = None) -> None:
        """Re-send work whose message was lost: a worker or the broker died between a ledger move
        and the send, or a send failed after the job was recorded. A chunk waiting longer than
        `orphan_after_s` with no message for it anywhere in the broker (waiting in its queue, or
        delivered and unacknowledged) gets one, however busy the queue (a duplicate would be
        harmless: only one claim can win)."""
        now = now or time.time()
        held: set[Work] | None = None

        def in_broker(work: Work) -> bool:
            nonlocal held
            if held is None:  # read the queues only once something looks lost
                every = self.ledger.every_queue(str(q) for q in Queue)  # projects' too
                held = queued_work(self.ledger.broker_messages(every))
            return work in held

        alive: dict[str, Any] | None = None

        def gone(worker: str) -> bool:
            nonlocal alive
            if alive is None:  # read the workers only once a stitch names one
                alive = self.ledger.workers(self.worker_gone_s)
            return bool(worker) and worker not in alive

        for job_id in self.ledger.live_job_ids():
            job = self.ledger.job(job_id)
            state = job.get("state")
            if state == JobState.STITCHING:
                started = float(job.get("stitch_started") or now)
                overdue = now - started > self.stitch_orphan_after_s
                # The stitch's worker gone (killed, reclaimed): its message is unacknowledged
                # until the broker's visibility timeout, hours away. A second stitch of a job is
                # harmless: the first to end moves it on, and the other finds it done.
                if gone(job.get("stitch_worker", "")) or (
                    overdue and not in_broker((STITCH.task, job_id, -1))
                ):
                    self.ledger.stitch_sent_again(job_id, now)
                    self.dispatch.stitch(job_id)
                    result.resent.append((job_id, -1))
                continue
            if state not in (JobState.QUEUED, JobState.RUNNING):
                continue
            kind = kind_of(job)
            for chunk in self.ledger.chunks(job_id):
                since = float(chunk.get("updated") or job.get("created") or now)
                if now - since < self.orphan_after_s:
                    continue
                phase = waiting_for(kind, chunk.get("state", ""))
                index = int(chunk["index"])
                if phase is None or in_broker((phase.task, job_id, index)):
                    continue
                self.dispatch.send(phase.phase, job_id, index)
                result.resent.append((job_id, index))

    def abort_early_uploads(self, result: Pass, now: float | None = None) -> None:
        """A job that failed or was cancelled may hold the upload its segments were copied into
        before the stitch: the parts are stored, and billed, until it is aborted. It is kept
        `early_upload_keep_s` after the job ended, for a retry to finish; then the ledger forgets
        it (unless the job was retried meanwhile: a retry after that begins a fresh upload) and
        only then is it aborted. An abort that fails is left to the bucket's lifecycle rule."""
        if self.store is None:
            return
        now = time.time() if now is None else now
        job_ids = self.ledger.job_ids(limit=1000)
        fields = self.ledger.job_fields(job_ids, "state", EARLY_UPLOAD, "finished")
        for job_id, (state, upload_id, finished) in zip(job_ids, fields, strict=True):
            if not upload_id or state not in (JobState.FAILED, JobState.CANCELLED):
                continue
            if now - float(finished or 0) < self.early_upload_keep_s:
                continue
            try:
                if not self.ledger.forget_early_upload(job_id, upload_id):
                    continue
                spec = JobSpec.from_json(json.loads(self.ledger.job(job_id)["spec"]))
                self.store.abort_multipart(keys.output_key(job_id, spec.deliverable), upload_id)
            except (FarmError, KeyError, ValueError) as exc:
                log.warning("could not abort the early upload of %s: %s", job_id, exc)
                continue
            result.aborted.append(job_id)

    def enforce_quotas(self, result: Pass) -> None:
        """The queued and running jobs of a project that used its quota (GPU-hours or dollars,
        its jobs' metered cost) are paused, the reason naming the project and the quota; the
        pause is kept in the store, so a rebuilt ledger keeps it."""
        paused = Projects(self.ledger).quota_pauses()
        result.paused |= paused
        if self.store is None:
            return
        for job_id, reason in paused.items():
            try:
                record_control(self.store, job_id, state=JobState.PAUSED, paused_reason=reason)
            except FarmError as exc:
                log.warning("job %s: its pause is not kept in the store (%s)", job_id, exc)

    def settle_waiting(self, result: Pass) -> None:
        """Jobs waiting for others (farm.control.depends): released once their parents are done,
        cancelled, naming the parent, when one failed. Every waiting job is looked at each pass,
        so a reconciler that was down when a parent ended catches up on its first pass."""
        settled = settle(self.ledger, self.store, self.dispatch)
        result.released += settled.released
        result.chain_cancelled |= settled.cancelled

    def settle_holds(self, result: Pass) -> None:
        """Jobs with `--hold` whose preview frames are done: held, the rest estimated from
        their timings; a release cut short is finished (farm.control.preview)."""
        held, _ = settle_holds(self.ledger, self.store, self.dispatch)
        result.held += held

    def run_once(self) -> Pass:
        """One pass; a step that fails is logged and the others still run."""
        result = Pass()
        steps = [self.check_ledger, self.record_ended, self.expire_leases, self.open_gates,
                 self.settle_waiting, self.settle_holds]  # fmt: skip
        if time.monotonic() >= self._next_orphan_sweep:
            self._next_orphan_sweep = time.monotonic() + self.orphan_after_s / 4
            steps.append(self.resend_orphans)
        if time.monotonic() >= self._next_spend_keep:
            self._next_spend_keep = time.monotonic() + SPEND_KEEP_S
            steps.append(self.keep_spend)
        if time.monotonic() >= self._next_quota_check:
            self._next_quota_check = time.monotonic() + QUOTA_CHECK_S
            steps.append(self.enforce_quotas)
        if time.monotonic() >= self._next_upload_sweep:
            self._next_upload_sweep = time.monotonic() + UPLOAD_SWEEP_S
            steps.append(self.abort_early_uploads)
        for step in steps:
            try:
                step(result)
            except FarmError as exc:
                log.warning("reconcile %s failed, will retry: %s", step.__name__, exc)
            except Exception:  # a bug or an unexpected library error must not stop the farm
                log.exception("reconcile %s raised; will retry next pass", step.__name__)
        return result

    def run_forever(self, interval_s: float) -> None:
        log.info("reconciler running every %.1f s", interval_s)
        while True:
            try:
                result = self.run_once()
                if any((result.requeued, result.failed, result.stitched, result.resent,
                        result.aborted, result.rebuilt, result.paused, result.released,
                        result.chain_cancelled, result.held)):  # fmt: skip
                    log.info("reconcile: %s", result)
            except Exception:  # never let one bad pass end the reconciler
                log.exception("reconcile pass failed, will retry")
            time.sleep(interval_s)
