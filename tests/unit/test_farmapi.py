"""farm.adapters.farmapi, the API's client, against a tiny HTTP server of the test's own on loopback:
the events stream parsed, each refusal turned into its error with the server's words, the token
only ever in the Authorization header, transfers streamed and checked."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from farm.adapters.farmapi import (
    APIError,
    APIUnreachable,
    BadRequest,
    ClientTooOld,
    FarmAPI,
    Forbidden,
    JobNotFound,
    ServerError,
    TokenRejected,
    TransferError,
    client_version,
    parse_events,
)
from farm.adapters.settings import Settings
from farm.core.errors import SpecError, TransientError, UnknownJob

TOKEN = "farm_s3cr3t-token-value"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    """Names in lower case."""
    body: bytes


@dataclass
class Server:
    """Answers each (method, path) from `answers` (status, headers, body); 200 {} otherwise.
    Every request is kept in `seen`."""

    url: str = ""
    answers: dict[tuple[str, str], tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def answer(self, method: str, path: str, status: int, body: Any, **headers: str) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers[(method, path)] = (status, headers, raw)


def _serve(server: Server, context: ssl.SSLContext | None = None) -> Iterator[Server]:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            server.seen.append(
                Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            status, headers, raw = server.answers.get((self.command, self.path), (200, {}, b"{}"))
            self.send_response(status)
            headers = {"Content-Type": "application/json", **headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    scheme = "https" if context else "http"
    server.url = f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _serve(Server())


def test_events_are_parsed_from_the_stream() -> None:
    # GIVEN a stream with a keepalive, two events, CRLF line ends and a data split over lines
    lines = [
        b": keepalive\n",
        b"event: status\n",
        b'data: {"state": "running"}\n',
        b"\n",
        b": keepalive\r\n",
        b"\r\n",
        b"event: end\r\n",
        b'data: {"state":\r\n',
        b'data:  "done"}\r\n',
        b"\r\n",
        b"data: plain words\n",
        b"\n",
    ]
    # WHEN it is parsed
    events = list(parse_events(lines))
    # THEN comments make no event, JSON is decoded, an unnamed event is a message
    assert events == [
        ("status", {"state": "running"}),
        ("end", {"state": "done"}),
        ("message", "plain words"),
    ]


def test_an_event_cut_off_before_its_blank_line_is_not_given() -> None:
    assert list(parse_events([b"event: status\n", b'data: {"state": "x"}\n'])) == []


def test_every_request_carries_the_token_in_a_header_and_never_in_the_url(server: Server) -> None:
    # GIVEN answers for the routes whose bodies the client reads
    server.answer("GET", "/api/v1/jobs?limit=3", 200, {"jobs": []})
    server.answer("GET", "/api/v1/jobs/j-1/logs?chunk=2", 200, {"logs": []})
    server.answer("GET", "/api/v1/users", 200, {"users": []})
    api = FarmAPI(server.url + "/", TOKEN)
    # WHEN every route is called
    api.server_version()
    api.whoami()
    api.uploads([{"sha256": "0" * 64, "size": 1, "kind": "scene", "suffix": ".blend"}])
    api.submit({"spec": {}})
    api.estimate({"spec": {}})
    api.jobs(3)
    api.job("j-1")
    api.pause("j-1")
    api.resume("j-1", 2.5)
    api.cancel("j-1")
    api.retry("j-1", every_unfinished=True)
    api.priority("j-1", 70)
    api.output("j-1", frames=True)
    api.logs("j-1", 2)
    api.users()
    api.add_user("ann", "artist", 30)
    api.revoke_user("ann")
    # THEN each went to its path with the token only in Authorization, and the client's version
    paths = [(s.method, s.path) for s in server.seen]
    assert paths == [
        ("GET", "/api/v1/version"),
        ("GET", "/api/v1/whoami"),
        ("POST", "/api/v1/uploads"),
        ("POST", "/api/v1/jobs"),
        ("POST", "/api/v1/estimate"),
        ("GET", "/api/v1/jobs?limit=3"),
        ("GET", "/api/v1/jobs/j-1"),
        ("POST", "/api/v1/jobs/j-1/pause"),
        ("POST", "/api/v1/jobs/j-1/resume"),
        ("POST", "/api/v1/jobs/j-1/cancel"),
        ("POST", "/api/v1/jobs/j-1/retry"),
        ("PUT", "/api/v1/jobs/j-1/priority"),
        ("GET", "/api/v1/jobs/j-1/output?frames=1"),
        ("GET", "/api/v1/jobs/j-1/logs?chunk=2"),
        ("GET", "/api/v1/users"),
        ("POST", "/api/v1/users"),
        ("DELETE", "/api/v1/users/ann"),
    ]
    for seen in server.seen:
        assert TOKEN not in seen.path
        assert seen.headers["authorization"] == f"Bearer {TOKEN}"
        assert seen.headers["x-farm-client"] == client_version() == "0.1.0"
        if seen.body:
            assert seen.headers["content-type"] == "application/json"
            assert TOKEN not in seen.body.decode()
    bodies = {s.path: json.loads(s.body) for s in server.seen if s.body}
    assert bodies["/api/v1/jobs/j-1/resume"] == {"max_cost": 2.5}
    assert bodies["/api/v1/jobs/j-1/retry"] == {"every_unfinished": True}
    assert bodies["/api/v1/jobs/j-1/priority"] == {"priority": 70}
    assert bodies["/api/v1/users"] == {"name": "ann", "role": "artist", "expires_days": 30}


def test_a_job_id_cannot_reach_another_route(server: Server) -> None:
    FarmAPI(server.url, TOKEN).job("../users")
    assert server.seen[0].path == "/api/v1/jobs/..%2Fusers"


def test_the_client_never_shows_its_token() -> None:
    api = FarmAPI("http://127.0.0.1:1", TOKEN)
    settings = Settings(api_url="http://127.0.0.1:1", api_token=TOKEN)
    assert TOKEN not in repr(api) and TOKEN not in repr(settings) and TOKEN not in str(settings)


@pytest.mark.parametrize(
    ("status", "kind", "bases"),
    [
        (403, Forbidden, (APIError,)),
        (400, BadRequest, (SpecError,)),
        (413, BadRequest, (SpecError,)),
        (409, APIError, (APIError,)),
        (503, ServerError, (TransientError,)),
    ],
)
def test_a_refusal_is_its_error_with_the_servers_words(
    server: Server, status: int, kind: type[APIError], bases: tuple[type[Exception], ...]
) -> None:
    said = f"refused for a reason the server gives ({status})"
    server.answer("POST", "/api/v1/jobs/j-1/cancel", status, {"error": said, "code": "some_code"})
    with pytest.raises(kind) as caught:
        FarmAPI(server.url, TOKEN).cancel("j-1")
    assert type(caught.value) is kind and isinstance(caught.value, bases)
    assert str(caught.value) == said
    assert (caught.value.status, caught.value.code) == (status, "some_code")


def test_a_rejected_token_says_to_log_in_again(server: Server) -> None:
    server.answer("GET", "/api/v1/whoami", 401, {"error": "this token has expired",
                  "code": "token_expired"}, **{"WWW-Authenticate": 'Bearer realm="farm"'})  # fmt: skip
    with pytest.raises(TokenRejected) as caught:
        FarmAPI(server.url, TOKEN).whoami()
    message = str(caught.value)
    assert message.startswith("this token has expired; ")
    assert f"`farm login {server.url} --token TOKEN`" in message
    assert caught.value.code == "token_expired" and TOKEN not in message


def test_an_old_client_gets_the_install_message_verbatim(server: Server) -> None:
    said = "this farm's API needs farm >= 0.2.0; install it with `pip install -U 'farm>=0.2.0'`"
    server.answer("GET", "/api/v1/jobs/j-1", 426, {"error": said, "code": "client_too_old"})
    with pytest.raises(ClientTooOld) as caught:
        FarmAPI(server.url, TOKEN).job("j-1")
    assert str(caught.value) == said


def test_an_unknown_job_is_unknown_job(server: Server) -> None:
    said = "no job j-2; `farm jobs` lists the jobs"
    server.answer("GET", "/api/v1/jobs/j-2", 404, {"error": said, "code": "unknown_job"})
    with pytest.raises(UnknownJob) as caught:
        FarmAPI(server.url, TOKEN).job("j-2")
    assert isinstance(caught.value, JobNotFound) and caught.value.job_id == "j-2"
    assert str(caught.value) == said


def test_an_answer_that_is_not_the_farms_says_to_check_the_address(server: Server) -> None:
    server.answer("GET", "/api/v1/whoami", 502, b"<html>Bad Gateway</html>", **{"Content-Type": "text/html"})  # fmt: skip
    server.answer("GET", "/api/v1/version", 200, b"<html>a web page</html>")
    api = FarmAPI(server.url, TOKEN)
    with pytest.raises(ServerError, match="answered 502 Bad Gateway; is api_url `farm web`'s"):
        api.whoami()
    with pytest.raises(APIError, match="not a JSON object: is api_url"):
        api.server_version()


def test_a_redirect_is_not_followed_with_the_token(server: Server) -> None:
    # GIVEN an API that redirects elsewhere, and a server there that records what it gets
    elsewhere = Server()
    for other in _serve(elsewhere):
        server.answer("GET", "/api/v1/whoami", 302, {}, Location=other.url + "/steal")
        # WHEN the client is sent there THEN it stops, and the other server saw nothing
        with pytest.raises(APIError, match="answered 302"):
            FarmAPI(server.url, TOKEN).whoami()
        assert other.seen == []


def test_no_server_is_unreachable_saying_where() -> None:
    with pytest.raises(
        APIUnreachable, match=r"no answer from the farm's API at http://127.0.0.1:9"
    ):
        FarmAPI("http://127.0.0.1:9", TOKEN).whoami()


def test_the_events_route_yields_its_events(server: Server) -> None:
    stream = b': keepalive\n\nevent: status\ndata: {"state": "running"}\n\nevent: end\ndata: {"state": "done"}\n\n'
    server.answer("GET", "/api/v1/jobs/j-1/events", 200, stream, **{"Content-Type": "text/event-stream"})  # fmt: skip
    events = list(FarmAPI(server.url, TOKEN).events("j-1"))
    assert events == [("status", {"state": "running"}), ("end", {"state": "done"})]
    assert server.seen[0].headers["accept"] == "text/event-stream"


def test_a_file_goes_up_with_its_length_and_without_the_token(
    server: Server, tmp_path: Path
) -> None:
    # GIVEN a file of several blocks
    path = tmp_path / "scene.blend"
    path.write_bytes(bytes(range(256)) * 12_000)  # 3 MB: three blocks of the client's
    # WHEN it is PUT to a presigned URL with the headers the API gave
    sent = FarmAPI(server.url, TOKEN).put_file(server.url + "/up?X-Amz-Signature=x", path,
                                               {"x-amz-meta-sha": "abc"})  # fmt: skip
    # THEN the bytes arrived whole, announced by their length, and no token went with them
    seen = server.seen[0]
    assert (seen.method, seen.path) == ("PUT", "/up?X-Amz-Signature=x")
    assert seen.body == path.read_bytes() and sent == len(seen.body)
    assert seen.headers["content-length"] == str(len(seen.body))
    assert seen.headers["x-amz-meta-sha"] == "abc"
    assert "authorization" not in seen.headers
    assert "content-type" not in seen.headers  # a query-string signature may cover it


def test_a_refused_upload_names_the_file_not_the_url(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "tex.png"
    path.write_bytes(b"png")
    server.answer("PUT", "/up?X-Amz-Signature=secret", 403,
                  b"<Error><Code>SignatureDoesNotMatch</Code></Error>")  # fmt: skip
    with pytest.raises(TransferError) as caught:
        FarmAPI(server.url, TOKEN).put_file(server.url + "/up?X-Amz-Signature=secret", path)
    assert str(path) in str(caught.value) and "SignatureDoesNotMatch" in str(caught.value)
    assert "secret" not in str(caught.value)


def test_a_download_lands_whole_or_not_at_all(server: Server, tmp_path: Path) -> None:
    server.answer("GET", "/video", 200, b"v" * 3_000_000)
    api = FarmAPI(server.url, TOKEN)
    dest = tmp_path / "out" / "job.mp4"
    assert api.get_file(server.url + "/video", dest, 3_000_000) == 3_000_000
    assert dest.read_bytes() == b"v" * 3_000_000
    assert "authorization" not in server.seen[0].headers
    # A listed size the body does not reach: nothing is left at dest, nor a part file
    short = tmp_path / "short.mp4"
    with pytest.raises(TransferError, match="stopped at 3000000 of 3000001 bytes"):
        api.get_file(server.url + "/video", short, 3_000_001)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_https_is_verified_against_the_ca_file(tmp_path: Path) -> None:
    # GIVEN an https server whose certificate a CA of the test's own signed
    from farm.adapters.tls import ensure_local_ca, server_context

    ca, cert, key = ensure_local_ca(tmp_path / "tls")
    for https in _serve(Server(), server_context(str(cert), str(key))):
        https.answer("GET", "/api/v1/whoami", 200, {"name": "ann", "role": "artist"})
        # THEN with that CA the client talks to it; without, it refuses, saying what to pass
        assert FarmAPI(https.url, TOKEN, str(ca)).whoami() == {"name": "ann", "role": "artist"}
        with pytest.raises(APIUnreachable, match=r"does not trust .*--ca-file CA\.crt"):
            FarmAPI(https.url, TOKEN).whoami()
        assert len(https.seen) == 1
