"""Every port a local farm's processes listen on (found from /proc, so a new one is never missed)
answers none of the farm's known paths anonymously, over plain HTTP or TLS: SeaweedFS's master,
volume, filer and admin ports (HTTP and gRPC), Flower's pages, API, metrics and health check, and
the job pages; nor does one take an anonymous object write. With the farm's credentials, each
port that has them answers: Flower and the job pages (basic auth), Redis (its password) and the
S3 API (the farm's keys)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
from pathlib import Path

import pytest

from tests.conftest import LocalFarm

pytestmark = pytest.mark.e2e
KEY = "jobs/secret-job/output.mp4"
PATHS = [
    "/", "/metrics", "/healthcheck", "/health", "/healthz", "/status", "/cluster/status",
    "/dir/status",
    "/vol/status", "/dir/assign", "/3,01637037d6", "/stats/counter",  # SeaweedFS
    "/api/workers", "/api/tasks", "/api/queues/length", "/workers", "/tasks", "/broker",  # Flower
    "/jobs/secret-job", "/jobs/secret-job/video.mp4", "/jobs/secret-job/thumbs/1.jpg",  # farm web
    "/jobs/secret-job/logs/00000-render-attempt1.log",
    f"/farm/{KEY}", f"/buckets/farm/{KEY}", "/buckets/farm/jobs/", "/farm?list-type=2",  # S3, filer
]  # fmt: skip
TIMEOUT_S = 5.0
"""How long a probe waits for an answer: a port that says nothing answers nothing."""
LIVENESS = ("/status", "/healthz")
"""The S3 gateway's liveness checks: an empty 200 to anyone, which SeaweedFS cannot turn off;
they say only that it is up (the only anonymous answers the test lets through)."""


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


def _anonymous_tls() -> ssl.SSLContext:
    """A client that takes any certificate and shows none of its own."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def request(
    scheme: str, port: int, method: str, path: str, auth: str = ""
) -> tuple[int | str, bytes]:
    """The HTTP status and body of one request, or the name of the error that stopped it."""
    if scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=TIMEOUT_S, context=_anonymous_tls()
        )
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    headers = {"Authorization": auth} if auth else {}
    try:
        conn.request(method, path, body=b"evil" if method == "PUT" else None, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read(4096)
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__, b""
    finally:
        conn.close()


def schemes(port: int) -> list[str]:
    """What the port answers: plain HTTP (any status line, a TLS server's "HTTP request to an
    HTTPS server" included) and/or a TLS handshake without a client certificate."""
    spoken = []
    if isinstance(request("http", port, "GET", "/")[0], int):
        spoken.append("http")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw:
            _anonymous_tls().wrap_socket(raw, server_hostname="127.0.0.1").close()
        spoken.append("https")
    except (OSError, ssl.SSLError):
        pass
    return spoken


def redis_answer(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"PING\r\nGET x\r\n")
        try:
            return sock.recv(200)
        except OSError:
            return b""


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_every_listening_port_refuses_anonymous_reads_and_writes(local_farm: LocalFarm) -> None:
    store = local_farm.store()
    store.put_bytes(KEY, b"the customer's film")
    state = json.loads((local_farm.data / "farm-up.json").read_text())
    ports = listening_ports(list(state["pids"].values()))
    assert len(ports) >= 12, ports  # redis, flower, web and weed's servers
    s3_port = int(local_farm.settings()["s3_endpoint"].rsplit(":", 1)[1])
    opened = []
    for port in sorted(ports):
        assert not redis_answer(port).startswith(b"+PONG"), f"port {port} answers Redis anonymously"
        for scheme in schemes(port):
            for path in PATHS:
                for method in ("GET", "PUT"):
                    status, body = request(scheme, port, method, path)
                    if not isinstance(status, int) or not 200 <= status < 300:
                        continue
                    if (port, method, path, body) in ((s3_port, "GET", p, b"") for p in LIVENESS):
                        continue
                    opened.append(f"{method} {scheme}://127.0.0.1:{port}{path} -> {status}")
    assert opened == []
    assert store.get_bytes(KEY) == b"the customer's film"


def test_the_ports_with_credentials_answer_with_them(local_farm: LocalFarm) -> None:
    """The other side of the refusals: the farm's own credentials still get in."""
    settings = local_farm.settings()
    auth = basic(settings["flower_user"], settings["flower_password"])
    flower = int(settings["flower_url"].rsplit(":", 1)[1])
    web = int(settings["web_url"].rsplit(":", 1)[1])
    answers = {
        f"flower {path}": request("http", flower, "GET", path, auth)[0]
        for path in ("/", "/metrics", "/healthcheck", "/api/workers")
    } | {f"web {path}": request("http", web, "GET", path, auth)[0] for path in ("/", "/metrics")}
    assert answers == dict.fromkeys(answers, 200)
    local_farm.ledger().ping()  # raises unless Redis takes the password
    store = local_farm.store()
    store.put_bytes("jobs/credentials-check/x", b"x")
    assert store.get_bytes("jobs/credentials-check/x") == b"x"
