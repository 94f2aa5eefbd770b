"""Webhooks on a real Redis: job moves put notices in the outbox once; the notifier POSTs them
signed to a real local receiver, and retries with backoff when the receiver fails."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from farm.control.webhooks import Notifier, subscribe
from farm.core import notices
from farm.core.backoff import backoff_s
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger

SECRET = "s3cret"


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
    notifier = Notifier(ledger=ledger, secret=SECRET)
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
    notifier = Notifier(ledger=ledger, secret=SECRET, notify_url=receiver.url)
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
    notifier = Notifier(ledger=ledger, notify_url=f"http://127.0.0.1:{port}/hook")
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
    notifier = Notifier(ledger=ledger, notify_url=f"http://127.0.0.1:{server.server_address[1]}/")
    ledger.cancel_job("j1")
    assert [d.status for d in notifier.drain_once()] == [302]
    assert receiver.got == []
    server.shutdown()
