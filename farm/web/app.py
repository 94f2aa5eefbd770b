"""`farm web`: the control plane's read-only HTTP face, behind the farm's basic auth.

/metrics is the Prometheus exporter (farm.web.exporter); / and /jobs/<id> are the job pages
(farm.web.jobpage), with thumbnails and logs proxied from the store and the video by presigned URL.
A plain WSGI app, served by farm.web.server: a few routes do not need a framework.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry

from farm.adapters.store import Store
from farm.core import keys
from farm.core.errors import FarmError
from farm.core.report import job_summary
from farm.ledger.ports import WebLedger
from farm.web import jobpage
from farm.web.exporter import registry_for, scrape

log = logging.getLogger(__name__)
StartResponse = Callable[..., Any]
Response = tuple[str, str, bytes, list[tuple[str, str]]]
_LOG_NAME = re.compile(r"^(\d{5})-\w+-attempt\d+(?:-claim\d+)?\.log$")
_JOB = r"(?P<job>[\w-]+)"  # job ids: letters, digits, - and _ (no dots: keys stay under jobs/)
HTML = "text/html; charset=utf-8"


def credentials_ok(header: str, user: str, password: str) -> bool:
    """Whether an Authorization header carries these Basic credentials (constant-time)."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    expected = f"{user}:{password}"
    return hmac.compare_digest(given.encode(), expected.encode())


def _log_order(key: str) -> tuple[str, int, str]:
    """A chunk's logs in the order they were made: by attempt, then render before encode."""
    name = key.rsplit("/", 1)[-1]
    attempt = re.search(r"attempt(\d+)", name)
    return name[:5], int(attempt.group(1)) if attempt else 0, "" if "render" in name else name


def _t(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


@dataclass(slots=True, kw_only=True)
class FarmWeb:
    ledger: WebLedger
    store: Store
    user: str
    password: str
    _registry: CollectorRegistry = field(init=False)
    _media_origin: str | None = field(init=False, default=None)
    _routes: list[tuple[re.Pattern[str], Callable[..., Response]]] = field(init=False)

    def __post_init__(self) -> None:
        self._registry = registry_for(self.ledger)
        self._routes = [
            (re.compile(r"^/metrics$"), self.metrics),
            (re.compile(r"^/$"), self.jobs),
            (re.compile(rf"^/jobs/{_JOB}/?$"), self.job),
            (re.compile(rf"^/jobs/{_JOB}/thumbs/(?P<frame>\d+)\.jpg$"), self.thumb),
            (re.compile(rf"^/jobs/{_JOB}/logs/(?P<name>[\w-]+\.log)$"), self.log_text),
            (re.compile(rf"^/jobs/{_JOB}/video\.mp4$"), self.video),
        ]

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not credentials_ok(environ.get("HTTP_AUTHORIZATION", ""), self.user, self.password):
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="farm"'), ("Content-Type", "text/plain"),
                 ("Cache-Control", "no-store")],
            )  # fmt: skip
            return [b"farm: credentials required\n"]
        path = environ.get("PATH_INFO", "/")
        try:
            status, ctype, body, extra = self.route(path)
        except FarmError as exc:
            log.warning("%s: %s", path, exc)
            status, ctype, body, extra = (
                "503 Service Unavailable",
                "text/plain",
                f"{exc}\n".encode(),
                [],
            )
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), *extra]
        # Logs and thumbnails were written in a scene's box: a browser never reads one as a page.
        # (farm.web.server adds the other headers every answer gets: SECURITY_HEADERS.)
        headers += [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")]
        if ctype == HTML:
            headers.append(("Content-Security-Policy", self._policy()))
        start_response(status, headers)
        return [body]

    def _policy(self) -> str:
        """The pages' CSP, which lets the video come from the store (farm.web.jobpage)."""
        if self._media_origin is None:
            try:
                parts = urlsplit(self.store.presign_get(keys.job_prefix("any"), 60))
                self._media_origin = f"{parts.scheme}://{parts.netloc}"
            except FarmError as exc:  # asked again on the next page
                log.warning("the store's address is unknown, so no video will play: %s", exc)
                return jobpage.content_security_policy()
        return jobpage.content_security_policy(self._media_origin)

    def route(self, path: str) -> Response:
        for pattern, handler in self._routes:
            if match := pattern.match(path):
                return handler(**match.groupdict())
        return self._missing("no such page")

    def _missing(self, what: str) -> Response:
        return "404 Not Found", HTML, jobpage.not_found(what).encode(), []

    def metrics(self) -> Response:
        return "200 OK", "text/plain; version=0.0.4; charset=utf-8", scrape(self._registry), []

    def jobs(self) -> Response:
        rows = []
        for job_id in self.ledger.job_ids(100):
            job = self.ledger.job(job_id)
            if job:
                chunks = self.ledger.chunks(job_id)
                rows.append((job_summary(job, chunks), self._cost(job_id, job)))
        return "200 OK", HTML, jobpage.jobs_page(rows).encode(), []

    def job(self, job: str) -> Response:
        record = self.ledger.job(job)
        if not record:
            return self._missing(f"no job {job}")
        chunks = self.ledger.chunks(job)
        summary = job_summary(record, chunks)
        times = {
            int(c.get("index", 0)): (_t(c.get("started")), _t(c.get("finished"))) for c in chunks
        }
        prefix = keys.job_prefix(job)
        frames = sorted(  # a frame's thumbnails: one a writer (keys.thumb_key)
            {int(k.rsplit("/", 1)[-1].split(".")[0]) for k in self.store.keys(prefix + "thumbs/")}
        )
        logs: dict[int, list[str]] = {}
        for key in sorted(self.store.keys(prefix + "logs/"), key=_log_order):
            name = key.rsplit("/", 1)[-1]
            if m := _LOG_NAME.match(name):
                logs.setdefault(int(m.group(1)), []).append(name)
        html = jobpage.job_page(
            summary, chunk_times=times, thumbs=frames[-12:], logs=logs,
            cost=self._cost(job, record), now=time.time(),
        )  # fmt: skip
        return "200 OK", HTML, html.encode(), []

    def _cost(self, job_id: str, job: dict[str, str]) -> jobpage.Cost | None:
        """Spent and expected dollars, once an attempt is metered or running at a price."""
        spend = self.ledger.spend(job_id, job)
        if not spend.cost.attempts and not spend.running:
            return None
        return spend.spent, spend.spent + spend.expected_rest

    def thumb(self, job: str, frame: str) -> Response:
        """The thumbnail of the frame as recorded: its record names the writer whose it is."""
        record = self.ledger.frame_records(job, [int(frame)]).get(int(frame))
        key = keys.thumb_key(job, int(frame), record.writer if record else None)
        size = self.store.size(key) if record else None
        if size is None or size > THUMB_MAX_BYTES:  # a scene's box wrote it: never read whole
            return self._missing(f"no thumbnail of frame {frame}")
        return "200 OK", "image/jpeg", self.store.get_bytes(key), []

    def log_text(self, job: str, name: str) -> Response:
        key = keys.job_prefix(job) + "logs/" + name
        size = self.store.size(key) if _LOG_NAME.match(name) else None
        if size is None:
            return self._missing(f"no log {name}")
        if size <= LOG_MAX_BYTES:
            return "200 OK", "text/plain; charset=utf-8", self.store.get_bytes(key), []
        tail = self.store.get_range(key, size - LOG_MAX_BYTES, LOG_MAX_BYTES)[0]
        note = f"[the first {size - LOG_MAX_BYTES} bytes left out; `farm logs {job}` has them]\n"
        return "200 OK", "text/plain; charset=utf-8", note.encode() + tail, []

    def video(self, job: str) -> Response:
        """A redirect to a short-lived presigned URL: the video never passes through here."""
        output = self.ledger.job(job).get("output", "")
        if not output:
            return self._missing(f"job {job} has no video yet")
        return "302 Found", "text/plain", b"", [("Location", self.store.presign_get(output, 600))]


THUMB_MAX_BYTES = 4 << 20
"""A thumbnail is a few KiB; anything near this was not made by the farm's thumbnailer."""
LOG_MAX_BYTES = 4 << 20
"""The end of a longer log is shown: the page's server holds what it sends in memory."""
