"""farm.web.server's streaming path (the API's server-sent events), over http and https: what the
app makes is sent as it is made, not held until its end; the stream stops when the client goes
and when the server stops; other paths are answered as before."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from tests.integration.test_web_server import _serving


class Streaming:
    """A WSGI app whose /stream answers "first", then nothing until `release`, then "second";
    every other path "plain"."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed = threading.Event()

    def streams(self, path: str) -> bool:
        return path == "/stream"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ["PATH_INFO"] != "/stream":
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "6")])
            return [b"plain\n"]
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return self._body()

    def _body(self) -> Iterator[bytes]:
        try:
            yield b"first\n"
            while not self.release.is_set():
                yield b""
            yield b"second\n"
        finally:
            self.closed.set()


def test_a_stream_is_sent_as_it_is_made_and_ends_with_the_app(scheme: str, tls_dir: Path) -> None:
    app = Streaming()
    with _serving(app, scheme, tls_dir) as served:
        answer = requests.get(served.url + "/stream", verify=served.verify, stream=True, timeout=30)
        chunks = answer.iter_content(chunk_size=None)
        # the first part arrives while the app still has more to say
        assert next(chunks) == b"first\n" and not app.closed.is_set()
        assert answer.headers["X-Frame-Options"] == "DENY"  # and the headers every answer gets
        app.release.set()
        assert b"".join(chunks) == b"second\n"
        assert app.closed.wait(30)
        assert requests.get(served.url + "/", verify=served.verify, timeout=30).text == "plain\n"


def test_a_stream_stops_when_its_client_goes(scheme: str, tls_dir: Path) -> None:
    app = Streaming()
    with _serving(app, scheme, tls_dir) as served:
        answer = requests.get(served.url + "/stream", verify=served.verify, stream=True, timeout=30)
        assert next(answer.iter_content(chunk_size=None)) == b"first\n"
        answer.close()
        # the server closed the app's answer: it is polled no more
        assert app.closed.wait(60), "the app was still polled after its client went"


def test_a_stream_ends_when_the_server_stops(scheme: str, tls_dir: Path) -> None:
    app = Streaming()
    with _serving(app, scheme, tls_dir) as served:
        answer = requests.get(served.url + "/stream", verify=served.verify, stream=True, timeout=30)
        chunks = answer.iter_content(chunk_size=None)
        assert next(chunks) == b"first\n"
        served.server.stop()
        assert b"".join(chunks) == b""  # the answer ends, whole, with nothing more
        assert app.closed.wait(30)
