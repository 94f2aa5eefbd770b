"""`farm metrics publish` reads a live farm's ledger and puts the backlog to CloudWatch (moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import kill_group, spawn_worker, submit, wait_for

pytestmark = pytest.mark.e2e

AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture
def cloudwatch_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_backlog_per_worker_comes_from_the_ledger(tmp_path: Path, cloudwatch_url: str) -> None:
    farm: LocalFarm = start_farm(tmp_path, workers=0)
    encoder = spawn_worker(farm, "encoder@test", queues="encode")
    try:
        wait_for(
            "the encode worker's heartbeat",
            lambda: "encoder@test" in farm.ledger().workers(),
            60,
            farm,
        )
        job_id = submit(farm, DEMO, "--frames", "1-12", "--chunk-size", "2", "--samples", "2")
        env = {**farm.env, **AWS, "AWS_ENDPOINT_URL_CLOUDWATCH": cloudwatch_url}
        out = LocalFarm(data=farm.data, config=farm.config, env=env).farm(
            "metrics", "publish", "--once", "--farm-name", "test", check=True
        )
        counts = json.loads(out.stdout.strip().splitlines()[-1])
        assert counts["queued"]["render"] == 6  # no render worker: every chunk still waits
        assert counts["workers"] == {"encode": 1}
        assert job_id

        cw = boto3.client("cloudwatch", endpoint_url=cloudwatch_url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip

        def backlog(queue: str) -> float:
            points = cw.get_metric_statistics(
                Namespace="Farm", MetricName="BacklogPerWorker",
                Dimensions=[{"Name": "Farm", "Value": "test"}, {"Name": "Queue", "Value": queue}],
                StartTime=datetime.now(UTC) - timedelta(minutes=5),
                EndTime=datetime.now(UTC) + timedelta(minutes=5), Period=60, Statistics=["Maximum"],
            )["Datapoints"]  # fmt: skip
            return float(points[0]["Maximum"])

        assert backlog("render") == 6.0  # no worker on render: scale out from zero
        assert backlog("encode") == 0.0
    finally:
        kill_group(encoder)
        farm.down()
