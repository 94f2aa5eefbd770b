"""Projects: who shares the farm, by what weight, within what quota.

The store is the record (projects/<name>.json, keys.project_key); the ledger keeps a copy for the
reads at every turn (farm.ledger.projects), put back from the store when the ledger lost it. A
project's weight is its share of the workers' turns (farm.core.queues); its quotas, in GPU-hours
or dollars, are held against its jobs' metered cost by the reconciler, which pauses the live
jobs of a project that used one up (`quota_pauses`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from farm.core import cost, keys
from farm.core import queues as queues_
from farm.core.errors import FarmError, ObjectMissing, SpecError
from farm.core.state import JobState
from farm.ledger import Project
from farm.ledger.ports import ProjectsLedger

if TYPE_CHECKING:
    from farm.adapters.store import Store

log = logging.getLogger(__name__)

SHARE_WINDOW_S = 3600.0
"""`farm projects` shows each project's share of the workers' time over this last stretch."""
SHARE_JOBS = 1000
"""The newest jobs that share is read from (each one's attempts: a read per job)."""


class BadProject(SpecError):
    """A project name, weight or quota the farm cannot take (CLI exit 2): fix it and ask again."""


class UnknownProject(SpecError):
    """No project of that name (CLI exit 2): the message gives the command that creates it."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no project {name!r}; `farm project add {name} --weight 1` creates it "
            "(`farm projects` lists the farm's projects)"
        )
        self.name = name

    def __reduce__(self) -> tuple[type[UnknownProject], tuple[str]]:
        return (UnknownProject, (self.name,))


class ProjectExists(FarmError):
    """`farm project add` of a name in use."""


def check_name(name: str) -> str:
    if why := queues_.check_project_name(name):
        raise BadProject(why)
    return name


def check_weight(weight: int) -> int:
    if not 1 <= weight <= queues_.MAX_WEIGHT:
        raise BadProject(
            f"weight {weight} is not a whole number from 1 to {queues_.MAX_WEIGHT}: a project "
            "of weight 2 gets two turns of the workers to a weight-1 project's one"
        )
    return weight


def check_quota(what: str, value: float | None) -> float | None:
    """A quota in `what` (GPU-hours, dollars); None or 0: none."""
    if value is None or value == 0:
        return None
    if value < 0:
        raise BadProject(f"a quota of {value:g} {what} is below 0; 0 removes the quota")
    return float(value)


def require_project(projects: Mapping[str, Project], name: str) -> Project:
    """The project a job is submitted to, among the ledger's; UnknownProject (exit 2) for
    none, saying how to create it."""
    found = projects.get(name)
    if found is None:
        raise UnknownProject(name)
    return found


# ── use against quota (pure) ─────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True, kw_only=True)
class Use:
    """What a project's jobs used: metered GPU-seconds (attempts that ended) and dollars
    (those, and the running attempts' spend so far)."""

    gpu_s: float = 0.0
    dollars: float = 0.0

    @property
    def gpu_hours(self) -> float:
        return self.gpu_s / 3600.0


def use_of(costs: Iterable[Mapping[str, str]], now: float) -> Use:
    """The sum of jobs' cost hashes (cost.job_cost)."""
    gpu_s = dollars = 0.0
    for raw in costs:
        spent = cost.job_cost(dict(raw))
        gpu_s += spent.gpu_s
        dollars += spent.spent + spent.running(now)
    return Use(gpu_s=gpu_s, dollars=dollars)


def quota_reason(project: Project, use: Use, job_id: str) -> str:
    """Why the job pauses: its project used a quota up; '' while within both."""
    name = project.name
    if project.quota_gpu_hours is not None and use.gpu_hours >= project.quota_gpu_hours:
        return (
            f"quota: project {name} used {use.gpu_hours:.3f} of its {project.quota_gpu_hours:g} "
            f"GPU-hours; `farm project set {name} --quota-gpu-hours N` raises it, then "
            f"`farm resume {job_id}`"
        )
    if project.quota_dollars is not None and use.dollars >= project.quota_dollars:
        return (
            f"quota: project {name} used {cost.money(use.dollars)} of its "
            f"{cost.money(project.quota_dollars)}; `farm project set {name} --quota-dollars N` "
            f"raises it, then `farm resume {job_id}`"
        )
    return ""


def worker_seconds(attempts: Iterable[Mapping[str, Any]], since: float, until: float) -> float:
    """Seconds of worker time the attempts (the ledger's attempt records: `t` their end, `s`
    their length) spent between `since` and `until`."""
    total = 0.0
    for attempt in attempts:
        end = float(attempt.get("t") or 0)
        start = end - float(attempt.get("s") or 0)
        total += max(min(end, until) - max(start, since), 0.0)
    return total


# ── the records ──────────────────────────────────────────────────────────────────────────────
class Projects:
    """The farm's projects: kept in the store and the ledger, and reported against their use."""

    def __init__(self, ledger: ProjectsLedger, store: Store | None = None) -> None:
        """`store` None: reads and quotas only (the ledger's copy); adding or changing a
        project needs the store, its record."""
        self.ledger = ledger
        self.store = store

    def _stored(self, name: str) -> Project | None:
        assert self.store is not None
        try:
            return Project.from_json(self.store.get_json(keys.project_key(name)))
        except ObjectMissing:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise FarmError(
                f"the store's record of project {name} ({keys.project_key(name)}) cannot be "
                f"read ({exc}); `farm project set {name} --weight W` writes it anew"
            ) from exc

    def _keep(self, project: Project) -> Project:
        """The record in the store first, then the ledger's copy."""
        if self.store is None:
            raise FarmError("projects are kept in the farm's store: run this on its host")
        self.store.put_json(keys.project_key(project.name),
                            {**project.to_json(), "updated": time.time()})  # fmt: skip
        self.ledger.save_project(project)
        return project

    def add(
        self,
        name: str,
        *,
        weight: int = 1,
        quota_gpu_hours: float | None = None,
        quota_dollars: float | None = None,
    ) -> Project:
        check_name(name)
        project = Project(
            name=name, weight=check_weight(weight), lanes=weight,
            quota_gpu_hours=check_quota("GPU-hours", quota_gpu_hours),
            quota_dollars=check_quota("dollars", quota_dollars), created=time.time(),
        )  # fmt: skip
        if name in self.ledger.projects() or (self.store is not None and self._stored(name)):
            raise ProjectExists(
                f"project {name} exists; `farm project set {name} --weight W` changes it"
            )
        return self._keep(project)

    def set(
        self,
        name: str,
        *,
        weight: int | None = None,
        quota_gpu_hours: float | None = None,
        quota_dollars: float | None = None,
    ) -> Project:
        """Change what is given (a quota of 0 removes it); the record is the store's, else
        the ledger's copy (a record the store lost is written anew)."""
        check_name(name)
        stored = self._stored(name) if self.store is not None else None
        found = stored or self.ledger.projects().get(name)
        if found is None:
            raise UnknownProject(name)
        if weight is not None:
            found = replace(found, weight=check_weight(weight), lanes=max(found.lanes, weight))
        if quota_gpu_hours is not None:
            found = replace(found, quota_gpu_hours=check_quota("GPU-hours", quota_gpu_hours))
        if quota_dollars is not None:
            found = replace(found, quota_dollars=check_quota("dollars", quota_dollars))
        return self._keep(found)

    def restore(self) -> list[str]:
        """Projects in the store the ledger lost, put back (a ledger rebuilt from the store):
        their names."""
        if self.store is None:
            return []
        held = self.ledger.projects()
        restored = []
        for key in self.store.keys(keys.PROJECTS_PREFIX):
            name = key.removeprefix(keys.PROJECTS_PREFIX).removesuffix(".json")
            if name in held or queues_.check_project_name(name):
                continue
            try:
                project = self._stored(name)
            except FarmError as exc:
                log.warning("%s", exc)
                continue
            if project is not None:
                self.ledger.save_project(project)
                restored.append(name)
        return restored

    def live_jobs(self) -> dict[str, list[str]]:
        """Project -> its jobs that have not ended (queued, running, paused, stitching)."""
        live = self.ledger.live_job_ids()
        found: dict[str, list[str]] = defaultdict(list)
        for job_id, (project,) in zip(live, self.ledger.job_fields(live, "project"), strict=True):
            if project:
                found[project].append(job_id)
        return dict(found)

    def use(self, name: str, now: float | None = None) -> Use:
        jobs = self.ledger.project_jobs(name)
        return use_of(self.ledger.cost_records(jobs), time.time() if now is None else now)

    def shares(self, now: float | None = None) -> dict[str, float]:
        """Each project's share of the workers' time over the last SHARE_WINDOW_S (attempts
        that ended, clipped to it), of all jobs' ('' : jobs of no project); {} for none."""
        now = time.time() if now is None else now
        since = now - SHARE_WINDOW_S
        ids = self.ledger.job_ids(SHARE_JOBS)
        fields = self.ledger.job_fields(ids, "project", "state", "finished")
        recent = [
            (job_id, project)
            for job_id, (project, state, finished) in zip(ids, fields, strict=True)
            if state not in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
            or float(finished or 0) >= since
        ]
        attempts = self.ledger.attempts_since((j for j, _ in recent), since)
        seconds: dict[str, float] = defaultdict(float)
        for (_, project), records in zip(recent, attempts, strict=True):
            seconds[project] += worker_seconds(records, since, now)
        total = sum(seconds.values())
        return {p: s / total for p, s in seconds.items()} if total > 0 else {}

    def report(self, now: float | None = None) -> list[dict[str, Any]]:
        """What `farm projects` shows: each project, its jobs, its use against its quotas and
        its share of the workers' time in the last hour."""
        now = time.time() if now is None else now
        live = self.live_jobs()
        shares = self.shares(now)
        rows = []
        for name, project in sorted(self.ledger.projects().items()):
            use = self.use(name, now)
            rows.append(
                {
                    **project.to_json(),
                    "jobs": len(self.ledger.project_jobs(name)),
                    "jobs_live": len(live.get(name, [])),
                    "gpu_hours": round(use.gpu_hours, 6),
                    "dollars": round(use.dollars, 6),
                    "over_quota": bool(quota_reason(project, use, "JOB")),
                    "share_last_hour": round(shares.get(name, 0.0), 4),
                }
            )
        return rows

    def quota_pauses(self, now: float | None = None) -> dict[str, str]:
        """The reconciler's step: every queued or running job of a project that used a quota up
        is paused, the reason naming the project and its quota. The jobs paused, with why."""
        now = time.time() if now is None else now
        limited = {
            n: p
            for n, p in self.ledger.projects().items()
            if p.quota_gpu_hours is not None or p.quota_dollars is not None
        }
        if not limited:
            return {}
        paused: dict[str, str] = {}
        for name, jobs in self.live_jobs().items():
            if name not in limited:
                continue
            states = self.ledger.job_fields(jobs, "state")
            active = [j for j, (s,) in zip(jobs, states, strict=True)
                      if s in (JobState.QUEUED, JobState.RUNNING)]  # fmt: skip
            if not active:
                continue
            use = self.use(name, now)
            for job_id in active:
                reason = quota_reason(limited[name], use, job_id)
                if reason and self.ledger.pause_job(job_id, reason).moved:
                    log.warning("job %s paused: %s", job_id, reason)
                    paused[job_id] = reason
        return paused
