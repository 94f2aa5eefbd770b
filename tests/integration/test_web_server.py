"""`farm web`'s pages through its real HTTP server, over http and https: a scene's name comes out
as text in every page, a slow client holds up no one, and a stop lets a request finish."""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import requests

from farm.core import keys
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState
from farm.ledger import Ledger
from farm.web import server as web_server
from farm.web.app import FarmWeb
from farm.web.server import WebServer, WSGIApp
from tests.integration.test_web import MemoryStore

EVIL = """<script>alert("it's")</script>"""


@dataclass(frozen=True)
class Served:
    url: str
    verify: str | bool
    server: WebServer

    def get(self, path: str, **kw: Any) -> requests.Response:
        kw.setdefault("auth", ("u", "p"))
        return requests.get(self.url + path, verify=self.verify, timeout=30, **kw)


@contextmanager
def _serving(app: WSGIApp, scheme: str, tls: Path) -> Iterator[Served]:
    files = (str(tls / "node.crt"), str(tls / "node.key")) if scheme == "https" else None
    server = WebServer(app, "127.0.0.1", 0, files)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    verify: str | bool = str(tls / "ca.crt") if files else True
    try:
        yield Served(url=f"{scheme}://127.0.0.1:{server.port}", verify=verify, server=server)
    finally:
        server.stop()
        thread.join(30)
    assert not thread.is_alive()


@pytest.fixture
def served(ledger: Ledger, scheme: str, tls_dir: Path) -> Iterator[Served]:
    """A job whose scene, worker and error are all written to break out of the page."""
    spec = build_render_spec(
        source_name=f"{EVIL}.blend", frames="1-4", chunk_size=2, resolution="320x180", fps=24,
        samples=4, codec="h264",
    )  # fmt: skip
    ledger.create_job(job_id="j1", spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")
    claim = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30, worker=EVIL)
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, token=claim.token, mode="fail", max_failures=3,
                      error=f"Blender said {EVIL}")  # fmt: skip
    store = MemoryStore({keys.log_key("j1", 0, 1, "render", 1): b"hi"})
    app = FarmWeb(ledger=ledger, store=store, user="u", password="p")  # type: ignore[arg-type]
    with _serving(app, scheme, tls_dir) as served:
        yield served


class _Page(HTMLParser):
    """What a browser makes of a page: its elements and its text, entities decoded."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.attrs: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [v for _, v in attrs if v]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_a_scenes_name_comes_out_as_text_in_every_page(served: Served) -> None:
    pages = {path: served.get(path) for path in ("/", "/jobs/j1", "/jobs/nope")}
    assert [r.status_code for r in pages.values()] == [200, 200, 404]
    for path, answer in pages.items():
        page = _Page(answer.text)
        assert "script" not in page.tags, path
        assert not any("<" in value for value in page.attrs), path
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert f"{EVIL}.blend" in _Page(pages["/"].text).text  # the scene, as its user named it
    job = _Page(pages["/jobs/j1"].text).text
    assert EVIL in job and f"Blender said {EVIL}" in job  # the worker and the chunk's error
    assert "&lt;script&gt;alert(" in pages["/"].text and "&#39;" in pages["/"].text


def test_a_page_needs_the_farms_credentials_through_the_server(served: Served) -> None:
    answer = served.get("/", auth=None)
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == 'Basic realm="farm"'


def test_every_answer_carries_the_security_headers(served: Served) -> None:
    """Found by a review: no page said it may not be framed, and none had a CSP."""
    log_name = keys.log_key("j1", 0, 1, "render", 1).rsplit("/", 1)[-1]
    answers = {path: served.get(path) for path in
               ("/", "/jobs/j1", "/jobs/nope", f"/jobs/j1/logs/{log_name}", "/metrics")}  # fmt: skip
    answers["anonymous"] = served.get("/", auth=None)
    assert [a.status_code for a in answers.values()] == [200, 200, 404, 200, 200, 401]
    for what, answer in answers.items():
        headers = answer.headers
        assert headers["X-Frame-Options"] == "DENY", what
        assert headers["X-Content-Type-Options"] == "nosniff", what
        assert headers["Referrer-Policy"] == "no-referrer", what
        assert headers["Cache-Control"] == "no-store", what
        policy = headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy, what
    page_policy = answers["/jobs/j1"].headers["Content-Security-Policy"]
    # the video, from the store; a ladder's stream, fed to a blob: by hls.js
    assert "media-src 'self' blob: http://store.invalid;" in page_policy
    assert "script-src 'self' 'unsafe-hashes' 'sha256-" in page_policy
    assert (
        "script-src" not in answers["/jobs/j1/logs/" + log_name].headers["Content-Security-Policy"]
    )


def test_an_answer_the_app_failed_carries_the_security_headers(scheme: str, tls_dir: Path) -> None:
    def failing(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("a bug")

    with _serving(failing, scheme, tls_dir) as served:
        answer = served.get("/", auth=None)
    assert answer.status_code == 500
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]


def test_the_job_pages_one_script_runs_under_its_policy_in_chromium(
    ledger: Ledger, tls_dir: Path, tmp_path: Path
) -> None:
    """The policy lets in the thumbnails' handlers (here onerror: the stored thumbnail is no
    JPEG), which write data-loaded; a policy that blocked them would leave it unwritten."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.fail("chromium is not installed; run `make setup`", pytrace=False)
    spec = build_render_spec(source_name="s.blend", frames="1-2", chunk_size=2,
                             resolution="320x180", fps=24, samples=4, codec="h264")  # fmt: skip
    ledger.create_job(job_id="j1", spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")
    store = MemoryStore({keys.thumb_key("j1", 1, None): b"no jpeg"})
    app = FarmWeb(ledger=ledger, store=store, user="u", password="p")  # type: ignore[arg-type]
    with _serving(app, "http", tls_dir) as served:
        url = served.url.replace("http://", "http://u:p@") + "/jobs/j1"
        argv = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
            "--dump-dom", url,
        ]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'data-loaded="error"' in result.stdout, result.stdout[-2000:]


def _hello(request: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "6")])
    return [b"hello\n"]


def test_slow_clients_hold_up_no_one(scheme: str, tls_dir: Path) -> None:
    """More clients than the server has threads, each half-way through its request (or its TLS
    handshake) and holding: another client still gets its page."""
    with _serving(_hello, scheme, tls_dir) as served:
        port = served.server.port
        half = b"\x16\x03\x01\x02" if scheme == "https" else b"GET / HTTP/1.1\r\nHost: x\r\n"
        slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
        assert len(slow) > web_server.THREADS
        try:
            for sock in slow:
                sock.sendall(half)
            answer = served.get("/", auth=None)
            assert answer.status_code == 200 and answer.text == "hello\n"
        finally:
            for sock in slow:
                sock.close()


def test_the_https_port_speaks_no_plain_http(tls_dir: Path) -> None:
    with _serving(_hello, "https", tls_dir) as served:
        with pytest.raises(requests.ConnectionError):
            requests.get(served.url.replace("https:", "http:"), timeout=30)
        context = ssl.create_default_context()  # the system's CAs do not know the farm's
        port = served.server.port
        with (
            pytest.raises(ssl.SSLCertVerificationError),
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ):
            context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_an_https_client_on_the_http_port_is_told_at_once(tls_dir: Path) -> None:
    """An https:// URL pointed at a farm without --tls fails its handshake with the server's
    answer, not a wait for the idle timeout (a ClientHello never ends a request's headers)."""
    with _serving(_hello, "http", tls_dir) as served:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with (
            socket.create_connection(("127.0.0.1", served.server.port), timeout=20) as raw,
            pytest.raises(ssl.SSLError),  # a timeout (the old wait) is no SSLError
        ):
            context.wrap_socket(raw, server_hostname="127.0.0.1")
        with socket.create_connection(("127.0.0.1", served.server.port), timeout=20) as raw:
            raw.sendall(b"\x16\x03\x01\x00\x05hello")
            assert _read_all(raw).startswith(b"HTTP/1.1 400")
        assert served.get("/", auth=None).text == "hello\n"  # and plain http still works


def test_a_host_whose_port_is_no_number_is_answered_400(scheme: str, tls_dir: Path) -> None:
    """Tornado reads the Host header's port as a number before the app is called: such a request
    gets a 400 and the connection ends (it got no answer and held the connection open)."""
    with _serving(_hello, scheme, tls_dir) as served:
        raw = socket.create_connection(("127.0.0.1", served.server.port), timeout=20)
        if scheme == "https":
            raw = ssl.create_default_context(cafile=str(tls_dir / "ca.crt")).wrap_socket(
                raw, server_hostname="127.0.0.1"
            )
        with raw:
            raw.sendall(b"GET / HTTP/1.1\r\nHost: a:b\r\n\r\n")
            answer = http.client.HTTPResponse(raw)  # type: ignore[arg-type]
            answer.begin()
            assert answer.status == 400
            assert answer.read() == b"farm: bad request (the Host header's port is not a number)\n"
            assert answer.getheader("X-Frame-Options") == "DENY"
        assert served.get("/", auth=None).text == "hello\n"


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_stop_lets_the_request_under_way_finish(scheme: str, tls_dir: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        entered.set()
        release.wait(30)
        return _hello(environ, start_response)

    answers: list[requests.Response] = []
    with _serving(slow, scheme, tls_dir) as served:
        client = threading.Thread(target=lambda: answers.append(served.get("/")))
        client.start()
        assert entered.wait(30)
        served.server.stop()
        release.set()
        client.join(30)
        assert [a.text for a in answers] == ["hello\n"]
    with pytest.raises(requests.ConnectionError):  # and the port is closed once it returned
        served.get("/")


def test_sigterm_stops_farm_web_cleanly(tmp_path: Path) -> None:
    """`farm down` sends SIGTERM: the server says it stopped and exits 0."""
    script = (
        "import logging, sys\n"
        "from farm.web.server import serve\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "def app(e, start):\n"
        "    start('200 OK', [('Content-Type', 'text/plain')])\n"
        "    return [b'up']\n"
        "serve(app, '127.0.0.1', 0)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )  # fmt: skip
    assert child.stderr is not None
    line = child.stderr.readline()
    assert "farm web on http://127.0.0.1:" in line, line
    url = line.split(" on ")[1].split()[0]
    assert requests.get(url, timeout=30).text == "up"
    child.send_signal(signal.SIGTERM)
    rest = child.stderr.read()
    assert child.wait(30) == 0, rest
    assert "farm web stopped" in rest and "Traceback" not in rest
