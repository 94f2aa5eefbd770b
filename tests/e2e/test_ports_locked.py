"""Every port a local farm's processes listen on refuses an anonymous read and write of an object
(SeaweedFS's master, volume, filer and admin ports included, HTTP and gRPC), while the S3 API
with the farm's keys still works."""

from __future__ import annotations

import json
import os
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import LocalFarm

pytestmark = pytest.mark.e2e
KEY = "jobs/secret-job/output.mp4"


def listening_ports(pids: list[int]) -> dict[int, int]:
    """{port: pid} of every TCP socket listening in the process groups of `pids` (Linux /proc)."""
    inodes: dict[str, int] = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(path).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                inodes[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    groups = set(pids)
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) not in groups:
                continue
            for fd in (entry / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    found[inodes[target[8:-1]]] = int(entry.name)
        except (OSError, ProcessLookupError):
            continue
    return found


def anonymous(method: str, url: str) -> int | str:
    """The HTTP status of an anonymous request (no credentials, no client certificate)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    data = b"evil" if method == "PUT" else None
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ssl.SSLError) as exc:
        return type(exc).__name__


def redis_answer(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\nGET x\r\n")
        try:
            return sock.recv(200)
        except OSError:
            return b""


def test_every_listening_port_refuses_anonymous_reads_and_writes(local_farm: LocalFarm) -> None:
    store = local_farm.store()
    store.put_bytes(KEY, b"the customer's film")
    state = json.loads((local_farm.data / "farm-up.json").read_text())
    ports = listening_ports(list(state["pids"].values()))
    assert len(ports) >= 12, ports  # redis, flower, web and weed's servers
    paths = [f"/farm/{KEY}", f"/buckets/farm/{KEY}", "/buckets/farm/jobs/", "/farm?list-type=2",
             "/dir/assign", "/3,01637037d6"]  # fmt: skip
    opened = []
    for port in sorted(ports):
        assert not redis_answer(port).startswith(b"+PONG"), f"port {port} answers Redis anonymously"
        for scheme in ("http", "https"):
            for path in paths:
                for method in ("GET", "PUT"):
                    status = anonymous(method, f"{scheme}://127.0.0.1:{port}{path}")
                    if isinstance(status, int) and 200 <= status < 300:
                        opened.append(f"{method} {scheme}://127.0.0.1:{port}{path} -> {status}")
    assert opened == []
    assert store.get_bytes(KEY) == b"the customer's film"
