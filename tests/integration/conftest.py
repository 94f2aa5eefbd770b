"""A real Redis server on a free loopback port, for ledger tests; the tiny scenes the render
script's tests render (render_scenes.py, built once a session)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from farm.ledger import Ledger
from farm.plan import plan_chunks
from farm.spec import JobSpec, build_render_spec


@pytest.fixture(scope="session")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scenes")
    build = Path(__file__).with_name("render_scenes.py")
    done = subprocess.run(
        [sys.executable, "-I", str(build), str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if not binary:
        pytest.fail("redis-server is not installed; run `make setup`", pytrace=False)
    port = _free_port()
    workdir: Path = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--requirepass", "test-pass"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://:test-pass@127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(10)


@pytest.fixture
def ledger(redis_url: str) -> Iterator[Ledger]:
    ledger = Ledger.from_url(redis_url)
    ledger.r.flushdb()
    yield ledger


def make_job(
    ledger: Ledger,
    job_id: str = "j1",
    frames: str = "1-20",
    chunk_size: int = 10,
    resolution: str = "320x180",
    samples: int = 4,
) -> JobSpec:
    """A render job of `frames` in chunks of `chunk_size`, recorded in the ledger (no messages)."""
    spec = build_render_spec(
        source_name="s.blend", frames=frames, chunk_size=chunk_size, resolution=resolution,
        fps=24, samples=samples, codec="h264",
    )  # fmt: skip
    ledger.create_job(
        job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, chunk_size), source_key="k"
    )
    return spec


def wait_until(condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Poll `condition` until it holds; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
