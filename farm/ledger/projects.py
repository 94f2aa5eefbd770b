"""Projects in the ledger: a copy of each project's record (the store's is the record,
farm.control.projects) for the reads at every turn, dispatch's route of a job's messages, and
each project's jobs, whose metered cost its quota is held against."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from farm.core import keys
from farm.ledger.base import LedgerBase, wrapped

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Project:
    """A project: its share of the workers' turns, and what it may spend."""

    name: str
    weight: int
    """Turns per round against a project of weight 1 (1..farm.core.queues.MAX_WEIGHT)."""
    lanes: int
    """Queues per phase that workers consume for it: its highest weight yet (a weight lowered
    leaves messages in the lanes above it, which are still served)."""
    quota_gpu_hours: float | None = None
    quota_dollars: float | None = None
    created: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "lanes": self.lanes,
                "quota_gpu_hours": self.quota_gpu_hours, "quota_dollars": self.quota_dollars,
                "created": self.created}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Project:
        """A record as the store or the ledger keeps it (ValueError, KeyError, TypeError for
        one that is not)."""

        def quota(name: str) -> float | None:
            value = data.get(name)
            return None if value is None else float(value)

        weight = int(data["weight"])
        return cls(
            name=str(data["name"]),
            weight=weight,
            lanes=max(int(data.get("lanes") or weight), weight),
            quota_gpu_hours=quota("quota_gpu_hours"),
            quota_dollars=quota("quota_dollars"),
            created=float(data.get("created") or 0.0),
        )


class ProjectRecords(LedgerBase):
    """The projects' hash and each project's jobs."""

    def projects(self) -> dict[str, Project]:
        """Every project, by name (one read: workers and dispatch ask often). A record that
        does not read is left out, with a warning."""
        with wrapped("read the projects"):
            raw: dict[str, str] = self.r.hgetall(keys.r_projects())
        found = {}
        for name, value in raw.items():
            try:
                found[name] = Project.from_json(json.loads(value))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("project %s: its record in the ledger does not read (%s)", name, exc)
        return found

    def project_lanes(self) -> dict[str, int]:
        """Project -> lanes: the queues workers consume (farm.core.queues.consumed)."""
        return {name: p.lanes for name, p in self.projects().items()}

    def save_project(self, project: Project) -> None:
        with wrapped(f"record project {project.name}"):
            self.r.hset(keys.r_projects(), project.name, json.dumps(project.to_json()))

    def job_route(self, job_id: str) -> tuple[str, int]:
        """(project, weight) of the job's messages: ('', 1) for a job of no project, and for
        one whose project the ledger does not know (its messages go to the phase's own queue,
        where every worker takes them, rather than to lanes no worker consumes)."""
        with wrapped("read the job's project"):
            name = self.r.hget(keys.r_job(job_id), "project") or ""
            if not name:
                return "", 1
            raw = self.r.hget(keys.r_projects(), name)
        try:
            return name, Project.from_json(json.loads(raw)).weight
        except (ValueError, KeyError, TypeError):
            log.warning("job %s: project %s is not in the ledger; its work goes to the "
                        "phase's own queue", job_id, name)  # fmt: skip
            return "", 1

    def add_project_jobs(self, name: str, jobs: Mapping[str, float]) -> None:
        """Count jobs (id -> submit time) as the project's (a ledger rebuilt from the store
        puts back the live ones its jobs' records name)."""
        if jobs:
            with wrapped(f"count jobs of project {name}"):
                self.r.zadd(keys.r_project_jobs(name), dict(jobs))

    def project_jobs(self, name: str) -> list[str]:
        """The project's jobs, oldest first."""
        with wrapped(f"list the jobs of project {name}"):
            ids: list[str] = self.r.zrange(keys.r_project_jobs(name), 0, -1)
        return ids

    def cost_records(self, job_ids: Iterable[str]) -> list[dict[str, str]]:
        """The metered cost hash of each job (cost.job_cost reads one), in one round trip."""
        wanted = list(job_ids)
        with wrapped("read the jobs' costs"):
            pipe = self.r.pipeline(transaction=False)
            for job_id in wanted:
                pipe.hgetall(keys.r_cost(job_id))
            found: list[dict[str, str]] = pipe.execute()
        return found

    def attempts_since(self, job_ids: Iterable[str], since: float) -> list[list[dict[str, Any]]]:
        """Each job's attempt records (Ledger.attempt_records) that ended at or after `since`
        (unix s), in one round trip: what a project's share of the workers' time is read from."""
        wanted = list(job_ids)
        with wrapped("read the jobs' attempts"):
            pipe = self.r.pipeline(transaction=False)
            for job_id in wanted:
                pipe.lrange(keys.r_attempts(job_id), 0, -1)
            raw: list[list[str]] = pipe.execute()
        out = []
        for entries in raw:
            records = (json.loads(e) for e in entries)
            out.append([r for r in records if float(r.get("t") or 0) >= since])
        return out
