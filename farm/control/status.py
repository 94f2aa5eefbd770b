"""A job as `farm status --json` and the API show it: farm.core.report's summary with its
priority, pause reason, cost and settings, owner and project, its chain (the jobs it waits
for and those that wait for it) and its siblings (`farm submit --each`) among them."""

from __future__ import annotations

import json
from typing import Any, Protocol

from farm.control.depends import chain
from farm.core.cost import Spend
from farm.core.errors import SpecError
from farm.core.report import job_summary
from farm.core.spec import JobSpec, provenance


class StatusLedger(Protocol):
    """What a job's status is read from (farm.ledger.Ledger)."""

    def job(self, job_id: str) -> dict[str, str]: ...
    def chunks(self, job_id: str) -> list[dict[str, str]]: ...
    def spend(self, job_id: str, job: dict[str, str] | None = None) -> Spend: ...
    def job_fields(self, job_ids: list[str], *names: str) -> list[tuple[str, ...]]: ...
    def children(self, job_id: str) -> list[str]: ...
    def group(self, group_id: str) -> list[str]: ...


def job_status(
    ledger: StatusLedger,
    job_id: str,
    job: dict[str, str] | None = None,
    *,
    with_chunks: bool = True,
) -> dict[str, Any]:
    """`job`: the job's record when read already. Without chunks, as `farm jobs --json` lists a
    job: no "chunks", frames rendered from the frames the ledger counts done."""
    job = ledger.job(job_id) if job is None else job
    summary = job_summary(job, ledger.chunks(job_id) if with_chunks else [])
    summary["priority"] = int(job.get("priority") or 50)
    summary["paused_reason"] = job.get("paused_reason", "")
    spend = ledger.spend(job_id, job)
    summary["cost"] = spend.to_json()
    if not with_chunks:
        summary["frames_rendered"] = spend.frames_done
        summary.pop("chunks")
        return summary
    summary["settings"] = _settings(summary["spec"])
    summary |= chain(ledger, None, job)  # the jobs it waits for, and those that wait for it
    summary["siblings"] = siblings(ledger, job)
    return summary


def siblings(ledger: StatusLedger, job: dict[str, str]) -> list[dict[str, str]]:
    """The other jobs of the job's `farm submit --each` group, oldest first: {id, state, member}
    (the view layer or camera each renders); none for a job submitted alone."""
    group_id, job_id = job.get("group", ""), job.get("id", "")
    if not group_id:
        return []
    others = [other for other in ledger.group(group_id) if other != job_id]
    found = []
    for other, (state, spec) in zip(
        others, ledger.job_fields(others, "state", "spec") if others else [], strict=True
    ):
        try:
            member = str((json.loads(spec or "{}").get("group") or {}).get("member", ""))
        except ValueError:  # a record from an older farm
            member = ""
        found.append({"id": other, "state": state or "gone", "member": member})
    return found


def _settings(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each render setting and where it came from, as `farm status --json` shows them."""
    if not spec:
        return {}
    try:
        return provenance(JobSpec.from_json(spec))
    except (SpecError, KeyError, TypeError, ValueError):  # a record from an older farm
        return {}
