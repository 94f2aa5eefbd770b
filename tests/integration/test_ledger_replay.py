"""A claim whose reply is lost: Redis ran it, the client's connection dropped before the answer
came, and redis-py sent the same call again. The claim answers as it did the first time (its
token, the job and the frames), so the worker runs the chunk now instead of leaving it claimed by
no one until its lease runs out (a lost lease, spent from the chunk's budget). A TCP proxy in
front of a real Redis drops the connection once, after Redis has answered a call that names
`marker`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from farm.core import keys
from farm.core.state import ChunkState
from farm.ledger import Claim, Ledger
from farm.ledger.lua import source
from tests.integration.conftest import make_job


class LosesOneReply:
    """127.0.0.1 proxy to Redis. Once, after a request holding `marker` went to Redis, it closes
    the client's connection instead of passing Redis's answer on."""

    def __init__(self, upstream: tuple[str, int], marker: bytes) -> None:
        self.upstream, self.marker = upstream, marker
        self.dropped = 0
        self.lost = b""
        """The answer that never reached the client."""
        self.on_drop: Callable[[], object] = lambda: None
        """Runs after the drop, before the client can send again (a Redis restart's effects)."""
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            armed = threading.Event()
            threading.Thread(target=self._up, args=(client, server, armed), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, armed), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, armed: threading.Event) -> None:
        while data := _recv(client):
            if self.marker in data and not self.dropped:
                armed.set()  # before Redis can answer it
            server.sendall(data)
        server.close()

    def _down(self, server: socket.socket, client: socket.socket, armed: threading.Event) -> None:
        while data := _recv(server):
            if armed.is_set() and not self.dropped:
                self.dropped, self.lost = 1, data
                self.on_drop()
                client.shutdown(socket.SHUT_RDWR)
                client.close()
                server.close()
                return
            client.sendall(data)
        client.close()

    def close(self) -> None:
        self._server.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


@pytest.fixture
def through_proxy(ledger: Ledger, redis_url: str) -> Iterator[tuple[Ledger, LosesOneReply]]:
    url = urlsplit(redis_url)
    proxy = LosesOneReply((url.hostname or "", url.port or 0), b"replayed@test")
    # Workers' ledgers retry through an outage (ride_out_s); this one 4 times (int(ride_out_s)).
    worker = Ledger.from_url(url._replace(netloc=f":test-pass@127.0.0.1:{proxy.port}").geturl(),
                             ride_out_s=4)  # fmt: skip
    # Redis has the ledger's scripts already, so the dropped answer is that of a call it ran
    # (not a NOSCRIPT, after which redis-py loads the script and runs the call for the first time).
    worker.r.script_load(source("chunk_move"))
    assert proxy.dropped == 0
    yield worker, proxy
    proxy.close()


def _render_claim(ledger: Ledger, name: str) -> Claim:
    return ledger.claim("j1", 0, ChunkState.RENDERING, only_from=frozenset({ChunkState.QUEUED}),
                        lease_s=30, worker=name)  # fmt: skip


def test_a_claim_sent_again_gets_the_chunk_it_took(
    through_proxy: tuple[Ledger, LosesOneReply], ledger: Ledger
) -> None:
    worker, proxy = through_proxy
    make_job(ledger)
    claim = _render_claim(worker, "replayed@test")
    assert proxy.dropped == 1 and b"NOSCRIPT" not in proxy.lost  # Redis ran it; no answer came
    chunk = ledger.chunk("j1", 0)
    assert claim.move.moved and claim.move.token == chunk["token"]
    assert claim.job["id"] == "j1" and claim.frames == list(range(1, 11))
    assert chunk["claims"] == "1" and chunk["worker"] == "replayed@test"
    events = [e["event"] for e in ledger.events("j1")]
    assert events.count("chunk-rendering") == 1


@pytest.mark.parametrize("restarted", [False, True], ids=["dropped", "redis-restarted"])
def test_a_render_done_and_its_encode_claimed_in_one_round_trip_sent_again(
    through_proxy: tuple[Ledger, LosesOneReply], ledger: Ledger, restarted: bool
) -> None:
    """Ledger.move_then_claim: both scripts ran; sent again, the done move finds the chunk
    already claimed past it, by this very call: the move stands and the claim is answered. Also
    where Redis restarted in between and lost its scripts (kept its data): the ledger loads the
    script and sends the same calls again."""
    worker, proxy = through_proxy
    if restarted:
        proxy.on_drop = ledger.r.script_flush
    make_job(ledger)
    render = _render_claim(worker, "w")
    assert proxy.dropped == 0
    move, claim = worker.move_then_claim(
        "j1", 0, ChunkState.RENDERED, token=render.move.token, fields={"frames_done": "10"},
        then=ChunkState.ENCODING, then_from=frozenset({ChunkState.RENDERED}), lease_s=30,
        worker="replayed@test",
    )  # fmt: skip
    assert proxy.dropped == 1 and b"NOSCRIPT" not in proxy.lost
    chunk = ledger.chunk("j1", 0)
    assert move.status == "same" and claim is not None
    assert chunk["state"] == "encoding" and claim.move.token == chunk["token"]
    assert chunk["claims"] == "2"  # the render's and the encode's, each once
    attempts = [(r["phase"], r["end"]) for r in ledger.attempt_records("j1")]
    assert attempts == [("rendering", "rendered")]


def test_a_frame_record_sent_again_counts_once(
    through_proxy: tuple[Ledger, LosesOneReply], ledger: Ledger
) -> None:
    """Found by the store and Redis fault tests: record_frame sent again after its answer was lost
    counted the frame's render, its bytes and its File Output bytes twice. The same record again
    (the attempt's own claim) counts nothing and answers as it did."""
    worker, proxy = through_proxy
    make_job(ledger)
    claim = _render_claim(ledger, "w")
    worker.r.script_load(source("record_frame"))
    recorded = worker.record_frame(
        "j1", 3, 500, "replayed@test", writer="0-1", token=claim.move.token, output_bytes=70,
        chunk=0,
    )  # fmt: skip
    assert proxy.dropped == 1 and b"NOSCRIPT" not in proxy.lost
    assert recorded.recorded and recorded.job_output_bytes == 70
    job = ledger.job("j1")
    assert (job["frame_bytes"], job["file_output_bytes"]) == ("500", "70")
    assert ledger.r.hget(keys.r_renders("j1"), "3") == "1"
