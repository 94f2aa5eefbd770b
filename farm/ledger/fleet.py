"""What the ledger knows beyond one job: the workers' heartbeats, the broker's queues (each phase's
own and its projects' lanes), the measurements remembered for auto-sized jobs, and every job at
once for the exporter."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from farm.core import keys
from farm.core import queues as queues_
from farm.core.chunking import Measurement
from farm.ledger.base import wrapped
from farm.ledger.projects import ProjectRecords

log = logging.getLogger(__name__)


class FleetRecords(ProjectRecords):
    """Workers, queues and measurements."""

    def heartbeat(self, name: str, info: dict[str, Any]) -> None:
        with wrapped("record a worker heartbeat"):
            self.r.hset(keys.r_workers(), name, json.dumps({**info, "seen": time.time()}))

    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]:
        with wrapped("list workers"):
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
        with wrapped("read worker heartbeats"):
            raw: list[str | None] = self.r.hmget(keys.r_workers(), wanted)
        return {name: json.loads(value) for name, value in zip(wanted, raw, strict=True) if value}

    def job_records(
        self, limit: int = 1000
    ) -> list[tuple[dict[str, str], list[dict[str, str]], dict[str, str]]]:
        """The newest `limit` jobs, each with its chunks and its cost hash, in three round trips
        however many there are (the exporter reads this on every scrape)."""
        ids = self.job_ids(limit)
        with wrapped("read the jobs"):
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

    def queue_length(self, queue: str) -> int:
        """Messages waiting for a phase queue's workers on this Redis: in the queue itself and
        in every project's lanes of it (farm.core.queues), kombu's suffixed priority lists
        included."""
        names = [queue, *queues_.project_queues(queue, self.project_lanes())]
        with wrapped(f"measure the {queue} queue"):
            pipe = self.r.pipeline(transaction=False)
            for name in names:
                for listed in queues_.priority_lists(name):
                    pipe.llen(listed)
            return int(sum(pipe.execute()))

    def every_queue(self, queues: Iterable[str]) -> list[str]:
        """The phase queues `queues` and every project's lanes of them: where a job's messages
        may wait."""
        return queues_.consumed(list(queues), self.project_lanes())

    def broker_messages(self, queues: Iterable[str]) -> list[bytes]:
        """Every message the broker holds for `queues`, waiting or delivered but unacknowledged,
        raw (farm.core.queues reads them): what the reconciler checks a lost message against."""
        with wrapped("read the queues"):
            pipe = self.r.pipeline(transaction=False)
            for queue in queues:
                for name in queues_.priority_lists(queue):
                    pipe.lrange(name, 0, -1)
            pipe.hvals(queues_.UNACKED)
            return [raw for batch in pipe.execute() for raw in batch]

    def save_measurement(
        self, scene_key: str, m: Measurement, *, resolution: str, samples: int
    ) -> None:
        """What a probe measured, for the next auto-sized job of the same scene (its key in the
        store) at the same resolution and samples."""
        with wrapped("record a measurement"):
            self.r.hset(
                keys.r_measurement(scene_key, resolution, samples),
                mapping={"startup_s": m.startup_s, "frame_s": m.frame_s, "source": m.source},
            )

    def measurement(self, scene_key: str, *, resolution: str, samples: int) -> Measurement | None:
        with wrapped("read a measurement"):
            raw: dict[str, str] = self.r.hgetall(keys.r_measurement(scene_key, resolution, samples))
        if not raw:
            return None
        return Measurement(
            startup_s=float(raw["startup_s"]), frame_s=float(raw["frame_s"]), source=raw["source"]
        )
