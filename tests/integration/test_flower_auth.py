"""`farm flower` on a real Redis: every route, Flower's /metrics and /healthcheck included, asks
for the farm's credentials, and answers with them."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "farm", "flower-pass"
PATHS = ["/", "/metrics", "/healthcheck", "/api/workers", "/api/tasks", "/api/queues/length",
         "/workers", "/tasks", "/broker", "/static/favicon.ico", "/login", "/logout"]  # fmt: skip


def status(url: str, auth: str = "") -> int:
    request = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def flower_url(redis_url: str, tmp_path: Path) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env |= {"FARM_CONFIG": str(tmp_path / "none.json"), "FARM_REDIS_URL": redis_url,
            "FARM_FLOWER_USER": USER, "FARM_FLOWER_PASSWORD": PASSWORD}  # fmt: skip
    log = (tmp_path / "flower.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "farm", "flower", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # until it listens (a generous limit for a loaded machine)
            if server.poll() is not None:
                pytest.fail((tmp_path / "flower.log").read_text())
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_every_flower_route_asks_for_credentials_and_answers_with_them(flower_url: str) -> None:
    """Found by a review: Flower's /metrics and /healthcheck answered anyone."""
    anonymous = {path: status(flower_url + path) for path in PATHS}
    assert anonymous.pop("/login") == 404  # an OAuth login page, with no OAuth set up
    assert {p: s for p, s in anonymous.items() if s != 401} == {}
    wrong = "Basic " + base64.b64encode(f"{USER}:guess".encode()).decode()
    assert status(flower_url + "/metrics", wrong) == 401
    right = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    for path in ("/metrics", "/healthcheck", "/api/workers", "/static/favicon.ico", "/"):
        assert status(flower_url + path, right) == 200, path
