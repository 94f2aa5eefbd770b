"""The fault proxy itself, against small servers of these tests' own on loopback: what it relays
untouched, each fault it injects, and what it counts."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from tests.faults.proxy import HttpFaultProxy, TcpFaultProxy


class _Store(BaseHTTPRequestHandler):
    """A stand-in for the store: PUT keeps a body by path, GET gives it back (or 4 KiB of the
    path's first letter), HEAD its size. Every request is counted."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    objects: ClassVar[dict[str, bytes]] = {}
    requests: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, status: int, body: bytes, *, head_only: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            out = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                out += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return out
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_PUT(self) -> None:
        self.requests.append(f"PUT {self.path}")
        self.objects[self.path] = self._body()
        self._answer(200, b"")

    def do_GET(self) -> None:
        self.requests.append(f"GET {self.path}")
        self._answer(200, self.objects.get(self.path, self.path[1:2].encode() * 4096))

    def do_HEAD(self) -> None:
        self.requests.append(f"HEAD {self.path}")
        self._answer(200, self.objects.get(self.path, b"?" * 4096), head_only=True)


@pytest.fixture
def store() -> Iterator[tuple[str, int]]:
    _Store.objects, _Store.requests = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield "127.0.0.1", server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(store: tuple[str, int]) -> Iterator[HttpFaultProxy]:
    with HttpFaultProxy(store, seed=7) as found:
        yield found


def _conn(proxy: HttpFaultProxy, timeout_s: float = 30) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout_s)


def _call(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    conn.request(method, path, body=body)
    answer = conn.getresponse()
    return answer.status, answer.read()


def test_requests_pass_through_untouched_on_one_kept_connection(proxy: HttpFaultProxy) -> None:
    conn = _conn(proxy)
    assert _call(conn, "PUT", "/farm/a", b"frame bytes") == (200, b"")
    assert _call(conn, "GET", "/farm/a") == (200, b"frame bytes")
    conn.request("HEAD", "/farm/a")
    head = conn.getresponse()
    assert (head.status, head.getheader("Content-Length"), head.read()) == (200, "11", b"")
    conn.request("PUT", "/farm/b", body=iter([b"chunk one, ", b"chunk two"]), encode_chunked=True)
    assert conn.getresponse().read() == b""
    assert _call(conn, "GET", "/farm/b") == (200, b"chunk one, chunk two")
    assert _Store.requests == ["PUT /farm/a", "GET /farm/a", "HEAD /farm/a", "PUT /farm/b",
                               "GET /farm/b"]  # fmt: skip
    assert proxy.injected() == {}
    assert [(s.method, s.path, s.fault) for s in proxy.seen()][:2] == [
        ("PUT", "/farm/a", ""), ("GET", "/farm/a", "")
    ]  # fmt: skip


def test_an_expect_100_continue_is_answered_by_the_proxy_and_the_body_goes_on(
    proxy: HttpFaultProxy,
) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(b"PUT /farm/e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                     b"Expect: 100-continue\r\n\r\n")  # fmt: skip
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"body")
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
    assert _Store.objects["/farm/e"] == b"body"


def test_the_next_n_requests_get_503_slowdown_and_the_rest_go_through(
    proxy: HttpFaultProxy,
) -> None:
    proxy.error(count=2)
    conn = _conn(proxy)
    for _ in range(2):
        status, body = _call(conn, "PUT", "/farm/x", b"data")
        assert status == 503
        assert b"<Code>SlowDown</Code>" in body and b"<RequestId>FAULT" in body
    assert _call(conn, "PUT", "/farm/x", b"data") == (200, b"")  # the same connection goes on
    assert _Store.requests == ["PUT /farm/x"]
    assert proxy.injected() == {"503 SlowDown": 2}
    assert [s.fault for s in proxy.seen()] == ["503 SlowDown", "503 SlowDown", ""]


def test_an_error_to_a_request_that_waits_to_send_its_body_closes_its_connection(
    proxy: HttpFaultProxy,
) -> None:
    proxy.error(403, "AccessDenied", "Access Denied")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(b"PUT /farm/e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                     b"Expect: 100-continue\r\n\r\n")  # fmt: skip
        answer = b""
        while data := sock.recv(4096):
            answer += data
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"Connection: close" in answer and answer.endswith(b"</Error>")
    assert _Store.requests == []


def test_a_fraction_of_requests_drawn_from_the_seed_gets_the_error(
    proxy: HttpFaultProxy,
) -> None:
    proxy.error(fraction=0.3)
    conn = _conn(proxy)
    statuses = [_call(conn, "GET", f"/farm/{i}")[0] for i in range(60)]
    errors = statuses.count(503)
    assert 0 < errors < 60 and statuses.count(200) == 60 - errors
    assert proxy.injected() == {"503 SlowDown": errors}
    assert len(_Store.requests) == 60 - errors


def test_only_requests_of_the_method_and_path_asked_for_meet_the_fault(
    proxy: HttpFaultProxy,
) -> None:
    proxy.error(403, "AccessDenied", "Access Denied", method="PUT", path=r"^/farm/jobs/j1/")
    conn = _conn(proxy)
    assert _call(conn, "PUT", "/farm/jobs/j1/frames/1", b"f")[0] == 403
    assert _call(conn, "GET", "/farm/jobs/j1/frames/1")[0] == 200
    assert _call(conn, "PUT", "/farm/jobs/j2/frames/1", b"f")[0] == 200
    assert _call(conn, "PUT", "/farm/jobs/j1/frames/2", b"f")[0] == 403
    conn.request("HEAD", "/farm/jobs/j1/frames/1")  # a HEAD's error has no body
    assert conn.getresponse().status == 200
    assert proxy.injected() == {"403 AccessDenied": 2}


def test_a_held_request_is_never_answered_until_its_client_gives_up(
    proxy: HttpFaultProxy,
) -> None:
    proxy.hold(count=1)
    conn = _conn(proxy, timeout_s=0.5)
    with pytest.raises(TimeoutError):
        _call(conn, "PUT", "/farm/held", b"done anyway")
    conn.close()
    # The store got it and did it (forward=True); only its answer was lost.
    assert _Store.objects["/farm/held"] == b"done anyway"
    assert _call(_conn(proxy), "GET", "/farm/held") == (200, b"done anyway")
    assert proxy.injected() == {"hold": 1}


def test_a_request_held_without_forwarding_never_reaches_the_store(
    proxy: HttpFaultProxy,
) -> None:
    proxy.hold(count=1, forward=False)
    with pytest.raises(TimeoutError):
        _call(_conn(proxy, timeout_s=0.5), "PUT", "/farm/lost", b"never")
    assert "/farm/lost" not in _Store.objects and _Store.requests == []


def test_a_slow_body_arrives_whole(proxy: HttpFaultProxy) -> None:
    proxy.slow(count=1, bytes_per_s=40_000)
    assert _call(_conn(proxy), "GET", "/farm/slow") == (200, b"f" * 4096)
    assert proxy.injected() == {"slow": 1}
    assert [s.fault for s in proxy.seen()] == ["slow"]


def test_a_reset_cuts_the_answer_short_with_an_rst(proxy: HttpFaultProxy) -> None:
    proxy.reset(count=1, after_bytes=100)
    conn = _conn(proxy)
    with pytest.raises((OSError, http.client.HTTPException)):
        _call(conn, "GET", "/farm/cut")
    assert _Store.requests == ["GET /farm/cut"]  # the store answered; the client lost it
    assert _call(_conn(proxy), "GET", "/farm/cut") == (200, b"f" * 4096)
    assert proxy.injected() == {"reset": 1}


def test_botocore_attempt_headers_are_recorded(proxy: HttpFaultProxy) -> None:
    conn = _conn(proxy)
    conn.request("GET", "/farm/a?x=1", headers={"amz-sdk-invocation-id": "abc",
                                                "amz-sdk-request": "attempt=3; max=5"})  # fmt: skip
    conn.getresponse().read()
    (seen,) = proxy.seen()
    assert (seen.path, seen.invocation, seen.attempt) == ("/farm/a", "abc", 3)


def test_bad_rules_are_refused_with_what_to_do(proxy: HttpFaultProxy) -> None:
    with pytest.raises(ValueError, match="count must be 1 or more"):
        proxy.error(count=0)
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        proxy.error(fraction=1.5)


# Plain TCP (Redis's side).


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A server that sends back whatever it gets, one thread a connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield "127.0.0.1", server.getsockname()[1]
    server.close()


def _echoes(port: int, payload: bytes = b"PING\r\n") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(payload)
        got = b""
        while len(got) < len(payload) and (data := sock.recv(4096)):
            got += data
        return got


def _answered(port: int) -> bool:
    try:
        return _echoes(port) == b"PING\r\n"
    except OSError:
        return False


def _wait(what: str, check: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(check) or not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_tcp_bytes_pass_through_both_ways(echo: tuple[str, int]) -> None:
    with TcpFaultProxy(echo) as proxy:
        assert _echoes(proxy.port, b"x" * 200_000) == b"x" * 200_000
        assert proxy.injected() == {}


def test_a_cut_resets_open_connections_and_refuses_new_ones_until_it_ends(
    echo: tuple[str, int],
) -> None:
    with TcpFaultProxy(echo) as proxy:
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
        held.sendall(b"hello")
        assert held.recv(100) == b"hello"
        _wait("the connection to be open", lambda: proxy.connections() == 1)
        assert proxy.cut(for_s=600) == 1
        with pytest.raises(ConnectionResetError):  # an RST, not a quiet close
            held.sendall(b"more")
            held.recv(100)
        held.close()
        assert not _answered(proxy.port)
        proxy.restore()
        assert _answered(proxy.port)
        counts = proxy.injected()
        assert counts["cut"] == 1 and counts["refused"] >= 1


def test_a_cut_ends_by_itself_after_its_time(echo: tuple[str, int]) -> None:
    with TcpFaultProxy(echo) as proxy:
        proxy.cut(for_s=0.5)
        _wait("connections to be taken again", lambda: _answered(proxy.port))
        assert not proxy.refusing()


def test_a_delay_holds_data_but_delivers_it_whole(echo: tuple[str, int]) -> None:
    with TcpFaultProxy(echo) as proxy:
        proxy.delay(0.05)
        assert _echoes(proxy.port, b"abc" * 1000) == b"abc" * 1000
        assert proxy.injected()["delay"] >= 2  # there and back
        proxy.restore()


def test_a_redis_url_is_aimed_at_the_proxy(echo: tuple[str, int]) -> None:
    with TcpFaultProxy(echo) as proxy:
        url = proxy.url_for("redis://worker:pa:ss@127.0.0.1:6379/0")
        assert url == f"redis://worker:pa:ss@127.0.0.1:{proxy.port}/0"
