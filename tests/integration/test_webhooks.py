"""Webhooks on a real Redis: job moves put notices in the outbox once; the notifier POSTs them
signed to a real local receiver, and retries with backoff when the receiver fails. The receivers
are on loopback, which webhooks reach only where FARM_WEBHOOK_ALLOW says so (LOOPBACK here)."""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from farm.adapters.tls import ensure_local_ca
from farm.cli.main import cli
from farm.control.webhooks import Notifier, Target, allowed_ranges, post, subscribe
from farm.core import notices
from farm.core.backoff import backoff_s
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger

SECRET = "s3cret"
LOOPBACK = allowed_ranges("127.0.0.0/8")
"""What a farm whose receivers are on its own machine sets FARM_WEBHOOK_ALLOW to."""


@dataclass
class Receiver:
    url: str
    answers: list[int] = field(default_factory=list)
    """Status codes to answer in turn (then 200)."""
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    box = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers["Content-Length"]))
            box.got.append((dict(self.headers), data))
            self.send_response(box.answers.pop(0) if box.answers else 200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield box
    server.shutdown()


def _job(ledger: Ledger, job_id: str = "j1") -> None:
    spec = build_render_spec(
        source_name="s.blend", frames="1-2", chunk_size=2, resolution="320x180",
        fps=24, samples=4, codec="h264",
    )  # fmt: skip
    ledger.create_job(job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")


def _fail_job(ledger: Ledger, job_id: str = "j1") -> None:
    claim = ledger.move_chunk(job_id, 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk(job_id, 0, ChunkState.QUEUED, token=claim.token, mode="fail",
                      max_failures=1, error="Blender crashed")  # fmt: skip


def test_a_chunk_that_spends_its_budget_announces_the_failed_job_once(ledger: Ledger) -> None:
    _job(ledger)
    _fail_job(ledger)
    ledger.move_job("j1", JobState.FAILED, error="again")  # already failed: no second notice
    assert ledger.job("j1")["state"] == "failed"
    assert [(n.job_id, n.event) for n, _ in ledger.pending_notices()] == [("j1", "job.failed")]


def test_a_budget_pause_is_its_own_event(ledger: Ledger) -> None:
    _job(ledger)
    ledger.move_job("j1", JobState.PAUSED, paused_reason="budget: spent $3", paused="1.0")
    assert [n.event for n, _ in ledger.pending_notices()] == ["job.budget"]


def test_the_notice_is_posted_signed_to_the_jobs_url(ledger: Ledger, receiver: Receiver) -> None:
    _job(ledger)
    subscribe(ledger, "j1", receiver.url)
    _fail_job(ledger)
    notifier = Notifier(ledger=ledger, secret=SECRET, allow=LOOPBACK)
    deliveries = notifier.drain_once()
    assert [d.ok for d in deliveries] == [True]
    headers, data = receiver.got[0]
    assert notices.verify(data, SECRET, headers[notices.SIGNATURE_HEADER])
    assert not notices.verify(data, "other", headers[notices.SIGNATURE_HEADER])
    body = json.loads(data)
    assert body["event"] == "job.failed" and body["job"]["id"] == "j1"
    assert "Blender crashed" in body["job"]["error"]
    assert headers[notices.EVENT_HEADER] == "job.failed"
    assert ledger.pending_notices() == []


def test_a_failed_delivery_is_retried_later_with_backoff(
    ledger: Ledger, receiver: Receiver
) -> None:
    _job(ledger)
    receiver.answers = [503]
    notifier = Notifier(ledger=ledger, secret=SECRET, notify_url=receiver.url, allow=LOOPBACK)
    ledger.cancel_job("j1")
    assert [d.status for d in notifier.drain_once()] == [503]
    [(notice, due)] = ledger.pending_notices()
    assert notice.tries == 1 and notice.url == receiver.url
    assert notifier.drain_once() == []  # not due yet: the backoff holds it
    ledger.r.zadd("farm:outbox", {notice.to_member(): 0})  # time passes
    assert [d.status for d in notifier.drain_once()] == [200]
    ids = {h[notices.DELIVERY_HEADER] for h, _ in receiver.got}
    assert len(receiver.got) == 2 and len(ids) == 1  # the same delivery, for the receiver to drop
    assert due > notice.t


def test_backoff_doubles_up_to_a_cap() -> None:
    backoff = partial(backoff_s, cap_s=notices.REDELIVERY_CAP_S)  # what the notifier waits
    assert [backoff(t) for t in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]
    assert backoff(30) == 600.0


def test_a_url_that_is_no_http_server_is_a_failed_delivery_not_a_dead_thread(
    ledger: Ledger,
) -> None:
    """Found by a review: an answer that was not HTTP (a --notify URL at an SSH port) raised
    out of the notifier's thread, and no webhook of the farm was sent again."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    _job(ledger)
    notifier = Notifier(ledger=ledger, notify_url=f"http://127.0.0.1:{port}/hook", allow=LOOPBACK)
    ledger.cancel_job("j1")
    [delivery] = notifier.drain_once()
    assert delivery.status == 0 and "BadStatusLine" in delivery.error
    [(notice, _)] = ledger.pending_notices()
    assert notice.tries == 1  # kept, to be tried again
    listener.close()


def test_a_redirect_is_not_followed(ledger: Ledger, receiver: Receiver) -> None:
    """A notice is never resent, as a GET, to wherever an answer points (169.254.169.254)."""

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", receiver.url)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _job(ledger)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    notifier = Notifier(ledger=ledger, notify_url=url, allow=LOOPBACK)
    ledger.cancel_job("j1")
    assert [d.status for d in notifier.drain_once()] == [302]
    assert receiver.got == []
    server.shutdown()


# ── webhooks aimed inside ────────────────────────────────────────────────────────────────────
_CONNECTS: list[list[object]] = []
"""The `socket.connect` addresses seen by the audit hook while a test listens (the hook, once
added, stays for the process: it acts only while a list is in here)."""


def _audit(event: str, args: tuple[object, ...]) -> None:
    """Records each connect and stops any to an address off this machine: a test of a refusal
    must never reach a metadata service or a private network, whatever the code under test does."""
    if event != "socket.connect" or not _CONNECTS:
        return
    address = args[1]
    _CONNECTS[-1].append(address)
    host = address[0] if isinstance(address, tuple) else ""
    if host and not ip_address(str(host).partition("%")[0]).is_loopback:
        raise PermissionError(f"the test stopped a connect to {host}")


@pytest.fixture
def connects() -> Iterator[list[object]]:
    """Every address this process connects a socket to during the test; any but loopback is
    stopped before it is reached."""
    if not getattr(sys, "_farm_webhook_audit", False):
        sys.addaudithook(_audit)
        sys._farm_webhook_audit = True  # type: ignore[attr-defined]
    seen: list[object] = []
    _CONNECTS.append(seen)
    yield seen
    _CONNECTS.remove(seen)


def test_a_loopback_url_is_dropped_without_the_setting_and_delivered_with_it(
    ledger: Ledger, receiver: Receiver
) -> None:
    """Found by a review: `--notify http://127.0.0.1:…` was delivered to the farm's own host."""
    _job(ledger)
    subscribe(ledger, "j1", receiver.url)
    ledger.cancel_job("j1")
    [delivery] = Notifier(ledger=ledger).drain_once()
    assert delivery.refused and "127.0.0.1 is loopback" in delivery.error
    assert "FARM_WEBHOOK_ALLOW" in delivery.error
    assert receiver.got == []
    assert ledger.pending_notices() == []  # dropped, never retried
    [dropped] = [e for e in ledger.events("j1") if e["event"] == "webhook-dropped"]
    assert "loopback" in dropped["error"]

    _job(ledger, "j2")
    subscribe(ledger, "j2", receiver.url)
    ledger.cancel_job("j2")
    assert [d.status for d in Notifier(ledger=ledger, allow=LOOPBACK).drain_once()] == [200]
    assert len(receiver.got) == 1


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data/iam/", "http://[fd00:ec2::254]/latest/",
     "http://100.100.100.200/latest/", "http://[::ffff:169.254.169.254]/", "http://10.0.0.1/",
     "http://0.0.0.0:8080/", "https://[::1]/hook"],
)  # fmt: skip
def test_an_internal_address_is_refused_without_a_connect(
    ledger: Ledger, connects: list[object], url: str
) -> None:
    _job(ledger)
    notifier = Notifier(ledger=ledger, notify_url=url, allow=LOOPBACK if "::1" in url else ())
    ledger.cancel_job("j1")
    [delivery] = notifier.drain_once()
    if "::1" in url:  # allowing 127.0.0.0/8 does not allow IPv6's loopback
        assert "::1 is loopback" in delivery.error
    assert delivery.refused and delivery.status == 0
    redis_port = ledger.r.connection_pool.connection_kwargs["port"]
    assert [a for a in connects if a[1] != redis_port] == []  # type: ignore[index]
    assert ledger.pending_notices() == []


def test_a_name_that_resolves_to_loopback_is_refused(
    ledger: Ledger, receiver: Receiver, connects: list[object]
) -> None:
    _job(ledger)
    url = receiver.url.replace("127.0.0.1", "localhost")
    notifier = Notifier(ledger=ledger, notify_url=url)
    ledger.cancel_job("j1")
    [delivery] = notifier.drain_once()
    assert (
        delivery.refused
        and "localhost resolves to " in delivery.error
        and "loopback" in delivery.error
    )
    assert receiver.got == []


def test_the_connection_goes_to_the_address_checked_with_the_name_kept(
    receiver: Receiver,
) -> None:
    """No second lookup between the check and the connect (DNS rebinding): the name below does
    not even resolve, yet the request reaches the address checked, with the name as Host."""
    port = int(receiver.url.rsplit(":", 1)[1].split("/")[0])
    target = _pinned(f"http://hooks.invalid:{port}/hook")
    delivery = post(target, b"{}", {}, 10.0, ssl.create_default_context())
    assert delivery.ok, delivery.error
    assert receiver.got[0][0]["Host"] == f"hooks.invalid:{port}"


def test_submit_refuses_an_internal_notify_url_naming_the_setting(
    tmp_path: Path, connects: list[object]
) -> None:
    done = CliRunner().invoke(
        cli, ["submit", "scene.blend", "--notify", "http://169.254.169.254/latest/"],
        env={"FARM_CONFIG": str(tmp_path / "none.json"), "FARM_WEBHOOK_ALLOW": ""},
        prog_name="farm",
    )  # fmt: skip
    assert done.exit_code == 2, done.output
    said = "--notify http://169.254.169.254/latest/: 169.254.169.254 is a cloud metadata address"
    assert said in done.output
    assert "FARM_WEBHOOK_ALLOW" in done.output


# ── a slow receiver ──────────────────────────────────────────────────────────────────────────
def test_a_slow_receiver_is_cut_at_the_deadline_and_holds_no_other_notice(
    ledger: Ledger, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a review: a receiver answering one byte every 5 s held the only sender for 300 s,
    and every other job's webhooks waited behind it."""
    held, ended, arrived = threading.Event(), threading.Event(), threading.Event()
    receiver.got = _Signal(lambda _item: arrived.set())
    listener = socket.create_server(("127.0.0.1", 0))

    def drip() -> None:
        """An answer of one byte every 2 s, until the notifier hangs up."""
        conn, _ = listener.accept()
        conn.recv(65536)
        held.set()
        try:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                time.sleep(2)
                conn.send(bytes([byte]))
        except OSError:
            pass  # cut
        finally:
            ended.set()
            conn.close()

    threading.Thread(target=drip, daemon=True).start()
    slow_url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    for job_id, url in (("slow", slow_url), ("fast", receiver.url)):
        _job(ledger, job_id)
        subscribe(ledger, job_id, url)
    notifier = Notifier(ledger=ledger, allow=LOOPBACK, deadline_s=6.0)
    ledger.cancel_job("slow")
    _pump_until(notifier, held.is_set)
    ledger.cancel_job("fast")
    _pump_until(notifier, arrived.is_set)
    assert not ended.is_set()  # the fast one arrived while the slow one was still held
    _pump_until(notifier, lambda: any(n.tries for n, _ in ledger.pending_notices()))
    [(retry, _)] = ledger.pending_notices()
    assert retry.job_id == "slow" and retry.tries == 1
    assert "failed (no answer in 6 s)" in caplog.text
    listener.close()


class _Signal(list[tuple[dict[str, str], bytes]]):
    """A receiver's list of what it got, calling `on_append` with each."""

    def __init__(self, on_append: Any) -> None:
        super().__init__()
        self._on_append = on_append

    def append(self, item: tuple[dict[str, str], bytes]) -> None:
        super().append(item)
        self._on_append(item)


def _pump_until(notifier: Notifier, done: Any, limit_s: float = 60.0) -> None:
    """Pump the notifier, as its thread does, until `done()` (a generous limit, for a stuck run)."""
    for _ in range(int(limit_s / 0.05)):
        if done():
            return
        notifier.pump()
        time.sleep(0.05)
    pytest.fail("the notifier did not get there")


def test_https_checks_the_certificate_against_the_name_not_the_address(
    receiver: Receiver, tmp_path: Path
) -> None:
    """The farm's own certificate names 127.0.0.1 only: reached at that address, the name
    `localhost` is refused (the check is on the URL's name), and 127.0.0.1 is taken."""
    tls_dir = tmp_path / "tls"
    ensure_local_ca(tls_dir)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls_dir / "node.crt", tls_dir / "node.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    targets = {name: _pinned(f"https://{name}:{port}/") for name in ("127.0.0.1", "localhost")}
    by_name = {name: post(t, b"{}", {}, 10.0, client) for name, t in targets.items()}
    server.shutdown()
    assert by_name["127.0.0.1"].ok, by_name["127.0.0.1"].error
    assert "certificate verify failed" in by_name["localhost"].error


def _pinned(url: str) -> Target:
    """`url`, its name resolved to 127.0.0.1 whatever it is."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return Target(url=url, host=parts.hostname, port=parts.port, tls=parts.scheme == "https",
                  path=parts.path or "/", addresses=("127.0.0.1",))  # fmt: skip


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass
