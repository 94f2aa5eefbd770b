"""`farm web` as a WSGI app over a real Redis and an in-memory store: auth, routes, escaping."""

from __future__ import annotations

import base64
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from farm.core import keys
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState
from farm.ledger import Ledger
from farm.web.app import FarmWeb, credentials_ok


class MemoryStore:
    """The parts of farm.adapters.store.Store the pages read."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def exists(self, key: str) -> bool:
        return key in self.objects

    def size(self, key: str) -> int | None:
        return len(self.objects[key]) if key in self.objects else None

    def get_bytes(self, key: str) -> bytes:
        return self.objects[key]

    def get_range(self, key: str, start: int, length: int) -> tuple[bytes, int, str]:
        return self.objects[key][start : start + length], len(self.objects[key]), "etag"

    def presign_get(self, key: str, expires_s: int = 900) -> str:
        return f"http://store.invalid/{key}?sig=x"


def _get(
    app: FarmWeb, path: str, auth: tuple[str, str] | None = ("u", "p")
) -> tuple[str, dict[str, str], bytes]:
    environ: dict[str, Any] = {"PATH_INFO": path}
    setup_testing_defaults(environ)
    if auth:
        environ["HTTP_AUTHORIZATION"] = (
            "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        )
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"], seen["headers"] = status, dict(headers)

    body = b"".join(app(environ, start_response))
    return seen["status"], seen["headers"], body


def _app(ledger: Ledger) -> FarmWeb:
    spec = build_render_spec(
        source_name="<b>shot</b>.blend", frames="1-4", chunk_size=2, resolution="320x180",
        fps=24, samples=4, codec="h264",
    )  # fmt: skip
    ledger.create_job(job_id="j1", spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")
    claim = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30, worker="w1")
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, token=claim.token, mode="fail", max_failures=3,
                      error="<script>boom</script>")  # fmt: skip
    ledger.record_frame("j1", 1, 3, "ab" * 32, writer="0-1")
    store = MemoryStore({
        keys.thumb_key("j1", 1, "0-1"): b"\xff\xd8jpeg",
        keys.thumb_key("j1", 1, "0-2"): b"\xff\xd8a stale attempt's",  # its claim was taken away
        keys.log_key("j1", 0, 1, "render", 1): b"Blender says hi",
    })  # fmt: skip
    return FarmWeb(ledger=ledger, store=store, user="u", password="p")  # type: ignore[arg-type]


def test_every_page_needs_the_farms_credentials(ledger: Ledger) -> None:
    app = _app(ledger)
    for path in ("/", "/metrics", "/jobs/j1", "/jobs/j1/thumbs/1.jpg"):
        assert _get(app, path, auth=None)[0].startswith("401")
        assert _get(app, path, auth=("u", "wrong"))[0].startswith("401")
    assert not credentials_ok("Basic !!!", "u", "p")


def test_the_job_list_shows_the_job_escaped(ledger: Ledger) -> None:
    status, headers, body = _get(_app(ledger), "/")
    text = body.decode()
    assert status.startswith("200") and headers["Content-Type"].startswith("text/html")
    assert 'data-job="j1"' in text and "&lt;b&gt;shot&lt;/b&gt;.blend" in text


def test_the_job_page_shows_thumbnails_chunks_errors_and_log_links(ledger: Ledger) -> None:
    app = _app(ledger)
    text = _get(app, "/jobs/j1")[2].decode()
    assert 'src="/jobs/j1/thumbs/1.jpg"' in text
    assert 'data-chunk="0" data-state="queued"' in text and "&lt;script&gt;boom" in text
    assert "<script>boom" not in text
    assert 'href="/jobs/j1/logs/00000-render-attempt1-claim1.log"' in text
    assert _get(app, "/jobs/j1/thumbs/1.jpg")[2] == b"\xff\xd8jpeg"
    assert _get(app, "/jobs/j1/logs/00000-render-attempt1-claim1.log")[2] == b"Blender says hi"
    assert _get(app, "/jobs/j1/thumbs/2.jpg")[0].startswith("404")
    assert _get(app, "/jobs/nope")[0].startswith("404")
    assert _get(app, "/jobs/j1/video.mp4")[0].startswith("404")  # not done yet


def test_what_a_scenes_box_wrote_is_served_bounded_and_never_sniffed(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: a thumbnail or log of any size was read whole into the page server's
    memory, and served without nosniff (a browser could read a log as HTML)."""
    import farm.web.app

    monkeypatch.setattr(farm.web.app, "LOG_MAX_BYTES", 8)
    monkeypatch.setattr(farm.web.app, "THUMB_MAX_BYTES", 4)
    app = _app(ledger)
    status, headers, body = _get(app, "/jobs/j1/logs/00000-render-attempt1-claim1.log")
    assert status.startswith("200")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert body == b"[the first 7 bytes left out; `farm logs j1` has them]\n says hi"
    assert _get(app, "/jobs/j1/thumbs/1.jpg")[0].startswith("404")  # 6 bytes, over 4
    assert _get(app, "/")[1]["X-Content-Type-Options"] == "nosniff"


def test_metrics_are_served_in_the_text_format(ledger: Ledger) -> None:
    status, headers, body = _get(_app(ledger), "/metrics")
    assert status.startswith("200") and headers["Content-Type"].startswith("text/plain")
    assert b'farm_chunks{queue="render",state="queued"} 2.0' in body
