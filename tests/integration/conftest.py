"""A real Redis server on a free loopback port, for ledger tests; a real SeaweedFS (one a module)
for store tests; the tiny scenes the render script's tests render (render_scenes.py, built once a
session)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import botocore.exceptions
import pytest
import redis

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.adapters.tls import ensure_local_ca
from farm.core.errors import FarmError
from farm.core.plan import plan_chunks
from farm.core.spec import JobSpec, build_render_spec
from farm.ledger import Ledger


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


WEED_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
              "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc")  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A Store on a SeaweedFS of its own (`weed mini`, S3 only, as `farm up` starts it)."""
    binary = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(binary).exists():
        pytest.fail("weed is not installed; run `make setup`", pytrace=False)
    home = tmp_path_factory.mktemp("weed")
    identities = home / "identities.json"
    identities.write_text(json.dumps({"identities": [{
        "name": "farm", "credentials": [{"accessKey": "test-key", "secretKey": "test-secret"}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}))  # fmt: skip
    ports = {name: _free_port() for name in WEED_PORTS}
    argv = [binary, "mini", f"-dir={home / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.config={identities}", "-bucket=farm", "-webdav=false", "-admin.ui=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
            *(f"-{name}={port}" for name, port in ports.items())]  # fmt: skip
    (home / "data").mkdir()
    with (home / "weed.log").open("wb") as log:
        server = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={"HOME": str(home)}
        )
    settings = Settings(
        s3_endpoint=f"http://127.0.0.1:{ports['s3.port']}", s3_bucket="farm",
        s3_access_key="test-key", s3_secret_key="test-secret",
    )  # fmt: skip
    found = Store.from_settings(settings)
    deadline = time.monotonic() + 60
    while True:
        try:
            found.ensure_bucket()
            found.put_bytes("ready", b"")
            break
        except (FarmError, botocore.exceptions.BotoCoreError):
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail((home / "weed.log").read_text()[-2000:], pytrace=False)
            time.sleep(0.2)
    yield found
    server.terminate()
    server.wait(30)


@pytest.fixture(scope="session")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The farm's own CA and certificate for 127.0.0.1, as `farm up --tls` makes them."""
    tls = tmp_path_factory.mktemp("tls") / "tls"
    ensure_local_ca(tls)
    return tls


@pytest.fixture(params=["http", "https"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)
