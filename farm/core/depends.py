"""Job dependencies (pure): the parents a job names (`farm submit --after`/`--after-any`), what
its parents' states mean for a waiting job, and the refusal of a chain that would loop.

farm.control.depends reads the states and acts: it refuses at submit, releases and cancels."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from farm.core.errors import SpecError
from farm.core.state import ENDED, JobState

MAX_PARENTS = 100
"""The most jobs one job may wait for: a chain is a handful of jobs, not the farm."""

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""What a job id may look like (intake.new_job_id's, and older or hand-made ones): no commas, no
spaces, nothing a Redis key or a store path would take apart."""

GONE = ""
"""A parent's state where neither the ledger nor the store knows the job any more."""
UNKNOWN = "unknown"
"""A parent's state where the store has the job but the ledger lost it and has not rebuilt it
yet: the child waits for the rebuild."""


class Verdict(StrEnum):
    WAIT = "wait"
    """A parent has not ended yet (or, with `--after`, has not ended and nothing has gone wrong)."""
    RELEASE = "release"
    """Every parent is done (`--after`) or has ended (`--after-any`): queue the job."""
    CANCEL = "cancel"
    """A parent failed, was cancelled or is gone (`--after` only): cancel the job, saying why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Parent:
    """One parent as the ledger (or the store) has it."""

    job_id: str
    state: str
    """A JobState, GONE or UNKNOWN."""
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    verdict: Verdict
    reason: str = ""
    """Why (the cancel's error, the release's note); '' while it waits."""


def parse_parents(text: str, flag: str = "--after") -> tuple[str, ...]:
    """`--after J1,J2` as job ids, each once, in the order given; SpecError naming what is wrong."""
    ids: list[str] = []
    for part in text.split(","):
        job_id = part.strip()
        if not job_id:
            raise SpecError(f"{flag} {text!r}: name each job once, separated by commas: J1,J2")
        check_parent_id(job_id, flag)
        if job_id not in ids:
            ids.append(job_id)
    if len(ids) > MAX_PARENTS:
        raise SpecError(f"{flag}: {len(ids)} jobs; a job may wait for {MAX_PARENTS} at most")
    return tuple(ids)


def check_parent_id(job_id: str, flag: str = "--after") -> None:
    if not JOB_ID.fullmatch(job_id):
        raise SpecError(f"{flag} {job_id!r} is not a job id (`farm jobs` lists them)")


def decide(parents: Iterable[Parent], *, after_any: bool) -> Decision:
    """What a waiting job does now, given its parents. `--after`: the first parent that failed,
    was cancelled or is gone cancels it (the reason names that parent and what happened); all
    done releases it. `--after-any`: released once every parent has ended, however it ended (a
    parent gone from the farm has ended too)."""
    listed = list(parents)
    if after_any:
        if all(p.state in ENDED or p.state == GONE for p in listed):
            ends = ", ".join(f"{p.job_id} {p.state or 'gone'}" for p in listed)
            return Decision(verdict=Verdict.RELEASE, reason=f"parents ended: {ends}")
        return Decision(verdict=Verdict.WAIT)
    for p in listed:
        if p.state == JobState.FAILED:
            return Decision(verdict=Verdict.CANCEL, reason=_why(p, "failed"))
        if p.state == JobState.CANCELLED:
            return Decision(verdict=Verdict.CANCEL, reason=_why(p, "was cancelled"))
        if p.state == GONE:
            return Decision(
                verdict=Verdict.CANCEL,
                reason=f"parent job {p.job_id} is gone from the farm (neither the ledger nor the "
                "store has it)",
            )
    if all(p.state == JobState.DONE for p in listed):
        return Decision(verdict=Verdict.RELEASE, reason="parents done: " + _ids(listed))
    return Decision(verdict=Verdict.WAIT)


def _why(parent: Parent, happened: str) -> str:
    tail = f": {parent.error}" if parent.error else ""
    return f"parent job {parent.job_id} {happened}{tail}"


def _ids(parents: list[Parent]) -> str:
    return ", ".join(p.job_id for p in parents)


def find_cycle(
    job_id: str, parents: Iterable[str], parents_of: Callable[[str], Iterable[str]]
) -> list[str] | None:
    """The chain from `job_id` back to itself through `parents` (and theirs, read with
    `parents_of`), or None where it has none. Each job is walked once."""
    seen: set[str] = set()
    trail: dict[str, str] = {}
    todo = [(p, job_id) for p in parents]
    while todo:
        current, child = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        trail[current] = child
        if current == job_id:
            path = [job_id]
            step = trail[job_id]
            while step != job_id:
                path.append(step)
                step = trail[step]
            path.append(job_id)
            return path[::-1]
        todo.extend((p, current) for p in parents_of(current))
    return None


def check_no_cycle(
    job_id: str, parents: Iterable[str], parents_of: Callable[[str], Iterable[str]]
) -> None:
    """SpecError where `job_id` would wait, through its parents, for itself."""
    cycle = find_cycle(job_id, parents, parents_of)
    if cycle is not None:
        raise SpecError(
            f"job {job_id} would wait for itself ({' waits for '.join(cycle)}): "
            "a chain of jobs runs one way; leave that parent out"
        )


def parents_of_record(job: Mapping[str, str]) -> tuple[str, ...]:
    """The parents named in a job's ledger record ('' where it has none)."""
    return tuple(j for j in job.get("after", "").split(",") if j)


def held(job: Mapping[str, str]) -> bool:
    """A job with parents that was never released: waiting, or paused while it waited (its
    resume puts it back to waiting)."""
    return bool(parents_of_record(job)) and not job.get("released")
