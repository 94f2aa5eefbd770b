"""CloudWatch backlog metrics the worker Auto Scaling groups track (namespace Farm).

The arithmetic is pure; BacklogPublisher only puts data through the boto3 client it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from farm.core.errors import TransientError

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "Farm"
BACKLOG_METRIC = "BacklogPerWorker"
QUEUED_METRIC = "QueuedChunks"
WORKERS_METRIC = "Workers"


class MetricsError(TransientError):
    """CloudWatch refused or failed a put: publish again on the next interval."""


def backlog_per_worker(queued: Mapping[str, int], workers: Mapping[str, int]) -> dict[str, float]:
    """Chunks per serving worker, for every queue named in either mapping. `queued` is the
    backlog farm.control.census counts (queued plus running chunks, so scale-in spares busy workers).

    With no worker on a queue the backlog is the queued count itself, so a group at zero sees
    the metric above its target and scales out; nothing queued and no workers is 0.0.
    """
    backlog: dict[str, float] = {}
    for queue in sorted(set(queued) | set(workers)):
        waiting = max(queued.get(queue, 0), 0)
        running = max(workers.get(queue, 0), 0)
        backlog[queue] = float(waiting) if running == 0 else waiting / running
    return backlog


def cloudwatch(region: str) -> Any:
    """A CloudWatch client for the region (boto3 is imported by the store and here alone)."""
    import boto3

    return boto3.client("cloudwatch", region_name=region)


class BacklogPublisher:
    """Puts BacklogPerWorker, QueuedChunks and Workers per queue, dimensions Farm and Queue."""

    def __init__(
        self, cloudwatch_client: Any, *, namespace: str = DEFAULT_NAMESPACE, farm_name: str
    ) -> None:
        self._client = cloudwatch_client
        self.namespace = namespace
        self.farm_name = farm_name

    def publish(
        self,
        backlog: Mapping[str, float],
        *,
        queued: Mapping[str, int] | None = None,
        workers: Mapping[str, int] | None = None,
    ) -> None:
        """One PutMetricData call: backlog per queue, plus the raw counts when given."""
        data: list[dict[str, Any]] = []
        for queue, value in sorted(backlog.items()):
            data.append(self._datum(BACKLOG_METRIC, queue, float(value)))
        for name, counts in ((QUEUED_METRIC, queued), (WORKERS_METRIC, workers)):
            for queue, count in sorted((counts or {}).items()):
                data.append(self._datum(name, queue, float(count)))
        if not data:
            return
        try:
            # PutMetricData takes at most 1000 data points per call; a farm has a handful.
            self._client.put_metric_data(Namespace=self.namespace, MetricData=data)
        except (BotoCoreError, ClientError) as exc:
            raise MetricsError(f"CloudWatch put_metric_data failed: {exc}") from exc
        log.debug("published %d metric data points to %s", len(data), self.namespace)

    def publish_counts(self, queued: Mapping[str, int], workers: Mapping[str, int]) -> None:
        """Compute the backlog from raw counts and publish all three metrics."""
        self.publish(backlog_per_worker(queued, workers), queued=queued, workers=workers)

    def _datum(self, metric: str, queue: str, value: float) -> dict[str, Any]:
        return {
            "MetricName": metric,
            "Dimensions": [
                {"Name": "Farm", "Value": self.farm_name},
                {"Name": "Queue", "Value": queue},
            ],
            "Value": value,
            "Unit": "Count",
        }
