"""Jobs that wait for others (`farm submit --after`): the parents checked at submit, and the
reconciler's step that queues a waiting job once its parents are done or cancels it, naming the
parent, when one fails (the rules: farm.core.depends).

The step reads every waiting job's parents on each pass rather than reacting to a parent's end:
a control plane that was down when a parent ended, or a ledger rebuilt from the store since,
releases the job on its first pass back. A parent the ledger no longer holds is read from the
store: its output there says done, its control record says failed or cancelled."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from farm.control.preview import chunk_frames, send_chunks
from farm.control.rebuild import read_control, record_control, stored_output
from farm.core import keys
from farm.core.depends import (
    GONE,
    UNKNOWN,
    Parent,
    Verdict,
    check_no_cycle,
    decide,
    held,
    parents_of_record,
)
from farm.core.errors import FarmError, ObjectMissing, SpecError
from farm.core.spec import JobSpec
from farm.core.state import JobState
from farm.ledger.ports import DependsLedger

if TYPE_CHECKING:
    from farm.adapters.store import Store
    from farm.dispatch import Dispatcher

log = logging.getLogger(__name__)


class ParentsLedger(Protocol):
    """What the submit's check reads: each parent's record."""

    def job(self, job_id: str) -> dict[str, str]: ...


class FieldsLedger(Protocol):
    """What a parent's state is read from."""

    def job_fields(self, job_ids: list[str], *names: str) -> list[tuple[str, ...]]: ...


class ChainLedger(FieldsLedger, Protocol):
    """What a job's chain, as its status shows it, is read from."""

    def children(self, job_id: str) -> list[str]: ...


def _stored_parents(store: Store | None, job_id: str) -> tuple[str, ...] | None:
    """The parents spec.json names for a job the ledger lost; None where the store has no job."""
    if store is None:
        return None
    try:
        doc = store.get_json(keys.spec_key(job_id))
    except ObjectMissing:
        return None
    try:
        return JobSpec.from_json(doc["spec"]).after
    except (KeyError, TypeError, ValueError):
        return ()


def check_parents(ledger: ParentsLedger, store: Store | None, job_id: str, spec: JobSpec) -> None:
    """At submit, before anything is recorded: each parent a job of this farm (the ledger's, or
    the store's where the ledger lost it), and no chain back to the job itself. SpecError naming
    the parent otherwise."""
    known: dict[str, tuple[str, ...]] = {}

    def parents_of(parent: str) -> tuple[str, ...]:
        if parent not in known:
            job = ledger.job(parent)
            stored = None if job else _stored_parents(store, parent)
            known[parent] = parents_of_record(job) if job else (stored or ())
        return known[parent]

    for parent in spec.after:
        if parent == job_id:
            raise SpecError(f"--after {parent}: a job cannot wait for itself")
        if not ledger.job(parent) and _stored_parents(store, parent) is None:
            raise SpecError(
                f"--after {parent}: no such job on this farm; `farm jobs` lists the jobs "
                "(name each parent by its id, e.g. j-20261202-101500-3fa9c1)"
            )
    check_no_cycle(job_id, spec.after, parents_of)


def parent_states(
    ledger: FieldsLedger, store: Store | None, parents: tuple[str, ...]
) -> list[Parent]:
    """Each parent's state and error: the ledger's, else what the store says of a job the ledger
    lost (done where its output is stored, its recorded end, UNKNOWN while a rebuild is due,
    GONE where the store has nothing of it)."""
    found = []
    for parent, (state, error) in zip(
        parents, ledger.job_fields(list(parents), "state", "error"), strict=True
    ):
        if not state:
            state, error = _stored_state(store, parent)
        found.append(Parent(job_id=parent, state=state, error=error))
    return found


def _stored_state(store: Store | None, job_id: str) -> tuple[str, str]:
    if store is None:
        return GONE, ""
    if _stored_parents(store, job_id) is None:
        return GONE, ""
    if stored_output(store, job_id) is not None:
        return str(JobState.DONE), ""
    control = read_control(store, job_id)
    if control.get("state") in (JobState.FAILED, JobState.CANCELLED):
        return str(control["state"]), str(control.get("error", ""))
    return UNKNOWN, ""


@dataclass(slots=True)
class Settled:
    """What one pass did to waiting jobs."""

    released: list[str] = field(default_factory=list)
    cancelled: dict[str, str] = field(default_factory=dict)
    """Jobs cancelled because a parent failed, was cancelled or is gone, with why."""


def settle(
    ledger: DependsLedger, store: Store | None, dispatch: Dispatcher, result: Settled | None = None
) -> Settled:
    """Every live job held for its parents (waiting, or paused while it waited): released and its
    chunks sent once they are done (a paused one stays held until `farm resume`), cancelled with
    the reason when one failed. Each move is a ledger transition one caller wins, so two
    reconcilers settle a job once."""
    result = result if result is not None else Settled()
    ids = ledger.live_job_ids()
    for job_id, (state,) in zip(ids, ledger.job_fields(ids, "state"), strict=True):
        if state not in (JobState.WAITING, JobState.PAUSED):
            continue
        job = ledger.job(job_id)
        if not held(job):
            continue
        parents = parent_states(ledger, store, parents_of_record(job))
        decision = decide(parents, after_any=job.get("after_mode") == "any")
        if decision.verdict is Verdict.CANCEL:
            _cancel(ledger, store, job_id, decision.reason, result)
        elif decision.verdict is Verdict.RELEASE and state == JobState.WAITING:
            _release(ledger, store, dispatch, job_id, decision.reason, result)
    return result


def _cancel(
    ledger: DependsLedger, store: Store | None, job_id: str, reason: str, result: Settled
) -> None:
    ledger.cancel_job(job_id, reason)
    if ledger.job(job_id).get("state") != JobState.CANCELLED:
        return  # moved meanwhile (a user cancelled it, another reconciler did)
    log.warning("job %s cancelled: %s", job_id, reason)
    result.cancelled[job_id] = reason
    _keep(store, job_id, state=JobState.CANCELLED, error=reason)


def _release(
    ledger: DependsLedger,
    store: Store | None,
    dispatch: Dispatcher,
    job_id: str,
    reason: str,
    result: Settled,
) -> None:
    if not ledger.release_job(job_id, reason).moved:
        return
    # Kept before the chunks go: a ledger rebuilt from the store queues the job, not waits again.
    _keep(store, job_id, released=time.time())
    job = ledger.job(job_id)
    # A send that fails here is the reconciler's to send again (resend_orphans: queued chunks
    # with no message): the job is queued already. Preview chunks go first (control.preview).
    chunks = ledger.chunks(job_id)
    send_chunks(dispatch, job, ((int(c["index"]), chunk_frames(c)) for c in chunks))
    log.info("job %s released (%s)", job_id, reason)
    result.released.append(job_id)


def _keep(store: Store | None, job_id: str, **changes: object) -> None:
    if store is None:
        return
    try:
        record_control(store, job_id, **changes)
    except FarmError as exc:
        log.warning("job %s: %s not kept in the store (%s)", job_id, json.dumps(changes), exc)


def chain(ledger: ChainLedger, store: Store | None, job: dict[str, str]) -> dict[str, object]:
    """A job's place in a chain, as its status shows it: the parents it waits (or waited) for with
    their states, how (`done`: all done; `any`: all ended), and the jobs that wait for it."""
    job_id = job.get("id", "")
    parents = parents_of_record(job)
    children = ledger.children(job_id) if job_id else []
    states = [s for (s,) in ledger.job_fields(children, "state")] if children else []
    return {
        "after": [
            {"id": p.job_id, "state": p.state or "gone"}
            for p in (parent_states(ledger, store, parents) if parents else [])
        ],
        "after_mode": job.get("after_mode", "") if parents else "",
        "released": bool(job.get("released")),
        "children": [
            {"id": c, "state": s or "gone"} for c, s in zip(children, states, strict=True)
        ],
    }
