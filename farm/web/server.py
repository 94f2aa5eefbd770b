"""The HTTP server `farm web` runs its WSGI app on (farm.web.app): tornado's, the app on threads.

Tornado because a connection costs it no thread: TLS handshakes and request reads run on its event
loop, so a slow or half-open client never holds up another (cheroot shakes hands on its one accept
thread; waitress has no TLS). It takes our SSLContext as it is, keeps connections alive, and stops
gracefully; Flower depends on it already.

Tornado's WSGIContainer buffers a whole answer before it sends it, so the paths an app says stream
(its `streams(path)`: the API's server-sent events) go another way here: the app's answer is
written as it is made, one poll of its iterator at a time in the thread pool, about once a second
while it has nothing to say, until it ends, the client goes, or the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tornado import httputil
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import bind_sockets
from tornado.wsgi import WSGIContainer

from farm.adapters.tls import server_context

log = logging.getLogger(__name__)
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

THREADS = 16
"""Requests answered at once: each reads the ledger and the store, blocking."""
IDLE_S = 60.0
"""A connection that sends no request for this long is closed (it holds a socket, no thread)."""
BODY_MAX_BYTES = 16 << 20
"""Tornado reads a request's body whole before the app sees it. The apps refuse by route what is
over their own limits, with a 413 that names the limit (the API: 8 MiB for a submission, 64 KiB
for the rest; a page: 64 KiB); a body up to twice the largest reaches them so that they can, and
a larger one tornado refuses itself (400, the connection closed) without keeping it."""
POLL_S = 1.0
"""A stream's pause between polls that had nothing to send (the API polls the ledger)."""
GRACE_S = 5.0
"""On a stop, how long the requests under way get to finish."""
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)
"""On every answer, where the app did not set its own (the job pages' CSP lets their images,
video and styles in): nothing loads, no other site frames a page or reads one as another type,
and no URL (a job's, a log's) leaves in a Referer."""


class _Container(WSGIContainer):
    """Counts the requests under way, so that a stop lets them finish, and logs each at debug:
    the access log is no part of the web's log (as with the standard library's server before)."""

    def __init__(
        self, app: WSGIApp, executor: ThreadPoolExecutor, stopping: asyncio.Event | None = None
    ) -> None:
        super().__init__(_answering(app), executor=executor)
        self.busy = 0  # touched on the event loop only
        self._streams: Callable[[str], bool] = getattr(app, "streams", lambda _: False)
        self._stopping = stopping or asyncio.Event()

    async def handle_request(self, request: httputil.HTTPServerRequest) -> None:
        if not _host_port_reads(request.host):
            _refuse(request, "the Host header's port is not a number")
            return
        self.busy += 1
        try:
            if self._streams(request.path):
                await self._stream(request)
            else:
                await super().handle_request(request)
        finally:
            self.busy -= 1

    async def _stream(self, request: httputil.HTTPServerRequest) -> None:
        """The app's answer written as it is made: each poll of its iterator runs in the pool;
        b"" (nothing yet) pauses POLL_S. Ends with the iterator, when the client is gone (a
        failed write, or the peer's end of the connection closed), or when the server stops."""
        loop = asyncio.get_running_loop()
        connection = request.connection
        assert connection is not None
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
            started.update(status=status, headers=headers)
            return lambda _: None  # the old write() callable: no app of the farm's uses it

        body = await loop.run_in_executor(
            self.executor, self.wsgi_application, self.environ(request), start_response
        )
        chunks = iter(body)

        def poll() -> bytes | None:
            try:
                return next(chunks, None)
            except Exception:  # the stream ends; its client may ask again
                log.exception("%s failed while streaming", request.path)
                return None

        code, _, reason = started["status"].partition(" ")
        headers = httputil.HTTPHeaders()
        for name, value in started["headers"]:
            headers.add(name, value)
        try:
            connection.write_headers(
                httputil.ResponseStartLine("HTTP/1.1", int(code), reason), headers
            )
            while not self._stopping.is_set():
                chunk = await loop.run_in_executor(self.executor, poll)
                if chunk is None:
                    break
                if chunk:
                    await connection.write(chunk)
                elif await self._gone(request):
                    break
            connection.finish()
        except StreamClosedError:
            log.debug("%s %s: the client went", request.remote_ip, request.path)
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                await loop.run_in_executor(self.executor, close)
        self._log(int(code), request)

    async def _gone(self, request: httputil.HTTPServerRequest) -> bool:
        """Pause POLL_S (less if the server stops); whether the client closed its end since."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), POLL_S)
        stream = getattr(request.connection, "stream", None)
        return stream is None or stream.closed() or _peer_closed(stream.socket)

    async def settle(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        while self.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def _log(self, status_code: int, request: httputil.HTTPServerRequest) -> None:
        log.debug("%s %s %s %d", request.remote_ip, request.method, request.path, status_code)


def _peer_closed(sock: socket.socket | None) -> bool:
    """Whether the peer closed its end of `sock` (or it failed), without reading from it: TCP's
    own state, so it holds for TLS too."""
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP)
    return any(
        events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL)
        for _, events in poller.poll(0)
    )


def _host_port_reads(host: str) -> bool:
    """Whether tornado's WSGI environ can read the Host header: it takes the part after one colon
    as the port with int(), which raises before the app is called."""
    hostport = host.split(":")
    if len(hostport) != 2:
        return True
    try:
        int(hostport[1])
    except ValueError:
        return False
    return True


def _refuse(request: httputil.HTTPServerRequest, why: str) -> None:
    """Answer 400 and close, for a request the WSGI environ cannot be made of."""
    assert request.connection is not None
    body = f"farm: bad request ({why})\n".encode()
    headers = [
        ("Content-Type", "text/plain"),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
    request.connection.write_headers(
        httputil.ResponseStartLine("HTTP/1.1", 400, "Bad Request"),
        httputil.HTTPHeaders(dict(_secured(headers))),
    )
    request.connection.write(body)
    request.connection.finish()


class _PlainServer(HTTPServer):
    """Plain http that turns a TLS handshake away at once: tornado would wait for a request's
    blank line, which a ClientHello never sends, until the idle timeout (an https:// URL pointed at
    a farm without --tls hung for a minute)."""

    def handle_stream(self, stream: IOStream, address: tuple[str, int]) -> None:
        loop, sock = IOLoop.current(), stream.socket

        def readable(fd: Any, events: int) -> None:
            loop.remove_handler(sock)
            loop.remove_timeout(idle)
            try:
                first = sock.recv(1, socket.MSG_PEEK)
            except OSError:
                first = b""
            if first == b"\x16":  # a TLS record's content type: handshake
                with contextlib.suppress(OSError):
                    sock.send(_TLS_ON_HTTP)
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(1 << 16)  # the hello: closed unread, it would reset what was sent
                stream.close()
            elif not first:
                stream.close()
            else:
                HTTPServer.handle_stream(self, stream, address)

        def quiet() -> None:
            loop.remove_handler(sock)
            stream.close()

        loop.add_handler(sock, readable, IOLoop.READ)
        idle = loop.call_later(IDLE_S, quiet)


_TLS_ON_HTTP = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    b"farm: this port speaks http, not https\n"
)


def _secured(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`headers` and the SECURITY_HEADERS they lack."""
    named = {name.lower() for name, _ in headers}
    return [*headers, *(h for h in SECURITY_HEADERS if h[0].lower() not in named)]


def _answering(app: WSGIApp) -> WSGIApp:
    """The app, answering 500 when it raises: tornado would leave the client waiting."""

    def answer(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def secured(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            return start_response(status, _secured(headers), *exc_info)

        try:
            return app(environ, secured)
        except Exception:
            log.exception("%s failed", environ.get("PATH_INFO", "/"))
            secured("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())
            return [b"farm: the page failed; the web's log says why\n"]

    return answer


class WebServer:
    """A WSGI app on `host:port`, bound when made (port 0: a free one, then in `port`)."""

    def __init__(
        self, app: WSGIApp, host: str, port: int, tls_files: tuple[str, str] | None = None
    ) -> None:
        self.app = app
        self.scheme = "https" if tls_files else "http"
        self._context = server_context(*tls_files) if tls_files else None
        # IPv4 on the one address asked for, as the standard library's server bound it.
        self._sockets = bind_sockets(port, host or None, family=socket.AF_INET)
        self.port: int = self._sockets[0].getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._stopping = asyncio.Event()

    def run(self, stop_signals: tuple[signal.Signals, ...] = ()) -> None:
        """Serve until `stop()` or one of `stop_signals`, then let the requests under way end."""
        try:
            self._loop.run_until_complete(self._serve(stop_signals))
        finally:
            for sock in self._sockets:
                sock.close()
            self._loop.close()

    def stop(self) -> None:
        """Ask `run` to return; from any thread."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopping.set)

    async def _serve(self, stop_signals: tuple[signal.Signals, ...]) -> None:
        for signum in stop_signals:
            asyncio.get_running_loop().add_signal_handler(signum, self._stopping.set)
        pool = ThreadPoolExecutor(THREADS, thread_name_prefix="farm-web")
        container = _Container(self.app, pool, self._stopping)
        kind = HTTPServer if self._context else _PlainServer
        server = kind(
            container, ssl_options=self._context, idle_connection_timeout=IDLE_S,
            max_body_size=BODY_MAX_BYTES,
        )  # fmt: skip
        server.add_sockets(self._sockets)
        try:
            await self._stopping.wait()
        finally:
            server.stop()  # no new connections
            await container.settle(GRACE_S)
            await server.close_all_connections()
            pool.shutdown(wait=False, cancel_futures=True)  # a request stuck past the grace


def serve(app: WSGIApp, host: str, port: int, tls_files: tuple[str, str] | None = None) -> None:
    """Serve until SIGTERM (`farm down`) or Ctrl-C; https when given (cert, key) files."""
    server = WebServer(app, host, port, tls_files)
    log.info("farm web on %s://%s:%d (metrics at /metrics)", server.scheme, host, server.port)
    server.run(stop_signals=(signal.SIGTERM, signal.SIGINT))
    log.info("farm web stopped")
