"""farm.adapters.metrics: backlog per worker (pure) and its CloudWatch publisher, against moto."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from farm.adapters.metrics import BacklogPublisher, MetricsError, backlog_per_worker
from farm.core.errors import TransientError


def test_backlog_is_queued_chunks_per_running_worker() -> None:
    assert backlog_per_worker({"render": 12, "encode": 3}, {"render": 4, "encode": 2}) == {
        "render": 3.0,
        "encode": 1.5,
    }


def test_backlog_with_no_workers_is_the_queue_itself_so_groups_leave_zero() -> None:
    assert backlog_per_worker({"render": 5}, {}) == {"render": 5.0}


def test_idle_farm_has_zero_backlog_on_every_known_queue() -> None:
    assert backlog_per_worker({"render": 0}, {"encode": 0}) == {"encode": 0.0, "render": 0.0}
    assert backlog_per_worker({}, {"render": 3}) == {"render": 0.0}


@pytest.fixture
def cloudwatch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        yield boto3.client("cloudwatch", region_name="us-east-1")


def _stat(client: Any, metric: str, queue: str) -> float:
    now = datetime.now(UTC)
    result = client.get_metric_statistics(
        Namespace="Farm",
        MetricName=metric,
        Dimensions=[{"Name": "Farm", "Value": "studio"}, {"Name": "Queue", "Value": queue}],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=5),
        Period=60,
        Statistics=["Maximum"],
    )
    [point] = result["Datapoints"]
    return float(point["Maximum"])


def test_publisher_puts_backlog_and_counts_per_queue(cloudwatch: Any) -> None:
    # GIVEN 12 render chunks on 4 workers and 3 encode chunks with no encoder running
    publisher = BacklogPublisher(cloudwatch, farm_name="studio")
    # WHEN the publisher puts them
    publisher.publish_counts({"render": 12, "encode": 3}, {"render": 4})
    # THEN CloudWatch holds BacklogPerWorker, QueuedChunks and Workers per queue
    assert _stat(cloudwatch, "BacklogPerWorker", "render") == 3.0
    assert _stat(cloudwatch, "BacklogPerWorker", "encode") == 3.0
    assert _stat(cloudwatch, "QueuedChunks", "render") == 12.0
    assert _stat(cloudwatch, "Workers", "render") == 4.0
    listed = cloudwatch.list_metrics(Namespace="Farm", MetricName="BacklogPerWorker")["Metrics"]
    dimensions = {tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"])) for m in listed}
    assert dimensions == {
        (("Farm", "studio"), ("Queue", "encode")),
        (("Farm", "studio"), ("Queue", "render")),
    }


def test_publisher_uses_the_namespace_it_is_given(cloudwatch: Any) -> None:
    BacklogPublisher(cloudwatch, namespace="FarmStaging", farm_name="studio").publish(
        {"render": 1.0}
    )
    assert cloudwatch.list_metrics(Namespace="FarmStaging")["Metrics"]
    assert not cloudwatch.list_metrics(Namespace="Farm")["Metrics"]


def test_cloudwatch_errors_become_transient_farm_errors() -> None:
    client = boto3.client(
        "cloudwatch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    with Stubber(client) as stub:
        stub.add_client_error(
            "put_metric_data", service_error_code="Throttling", http_status_code=400
        )
        with pytest.raises(MetricsError) as caught:
            BacklogPublisher(client, farm_name="studio").publish({"render": 2.0})
    assert isinstance(caught.value, TransientError)
    assert "Throttling" in str(caught.value)


def test_nothing_to_publish_makes_no_call() -> None:
    client = boto3.client(
        "cloudwatch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    with Stubber(client):  # any call would raise: no responses are queued
        BacklogPublisher(client, farm_name="studio").publish({})
