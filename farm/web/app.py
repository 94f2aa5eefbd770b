"""`farm web`: the control plane's HTTP face.

/api/ and /openapi.json are the API (farm.web.api.FarmAPI), with its own tokens. The rest is
read-only, behind the farm's basic auth (Flower's credentials) or a login session: /login takes a
user's API token and sets a signed cookie (farm.web.session). /metrics is the Prometheus exporter
(farm.web.exporter); / and /jobs/<id> are the job pages (farm.web.jobpage), with thumbnails and
logs proxied from the store and the video by presigned URL. A user logged in sees what their
role may (farm.core.access): an artist reads every job, and another's logs and video not.
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
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from prometheus_client import CollectorRegistry

from farm.adapters.store import Store
from farm.control.depends import chain
from farm.control.status import siblings
from farm.control.users import TokenRefused, User
from farm.core import keys
from farm.core.access import Action, allowed
from farm.core.errors import FarmError
from farm.core.report import job_summary
from farm.ledger.ports import WebLedger
from farm.web import jobpage, session
from farm.web.exporter import registry_for, scrape

if TYPE_CHECKING:
    from farm.web.api import FarmAPI

log = logging.getLogger(__name__)
StartResponse = Callable[..., Any]
Response = tuple[str, str, bytes, list[tuple[str, str]]]
_LOG_NAME = re.compile(r"^(\d{5})-\w+-attempt\d+(?:-claim\d+)?\.log$")
_JOB = r"(?P<job>[\w-]+)"  # job ids: letters, digits, - and _ (no dots: keys stay under jobs/)
_PACKAGE_FILE = r"(?P<name>[\w-]+\.(?:m3u8|mpd|m4s|vtt))"  # as farm.media.package names them
HTML = "text/html; charset=utf-8"
PAGE_BODY_MAX_BYTES = 64 << 10
"""A page request's body (the login form's token); the API's routes have their own limits."""
OPERATOR = None
"""Who holds the farm's basic-auth credentials: an operator, who sees everything."""


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
    api: FarmAPI | None = None
    """The API, handed every path under /api/ and /openapi.json; its users log in to the pages."""
    _registry: CollectorRegistry = field(init=False)
    _media_origin: str | None = field(init=False, default=None)
    _routes: list[tuple[re.Pattern[str], Callable[..., Response], Action]] = field(init=False)
    _key: bytes = field(init=False)
    _people: tuple[float, dict[str, User]] = field(init=False, default_factory=lambda: (-1e9, {}))

    def __post_init__(self) -> None:
        self._registry = registry_for(self.ledger)
        self._key = session.session_key(self.password)
        read, out, listed = Action.READ_JOB, Action.OUTPUT, Action.LIST_JOBS
        self._routes = [
            (re.compile(r"^/metrics$"), self.metrics, Action.LIST_JOBS),
            (re.compile(r"^/$"), self.jobs, Action.LIST_JOBS),
            (re.compile(rf"^/jobs/{_JOB}/?$"), self.job, read),
            (re.compile(rf"^/jobs/{_JOB}/thumbs/(?P<frame>\d+)\.jpg$"), self.thumb, read),
            (re.compile(rf"^/jobs/{_JOB}/logs/(?P<name>[\w-]+\.log)$"), self.log_text, Action.LOGS),
            (re.compile(rf"^/jobs/{_JOB}/video\.mp4$"), self.video, Action.OUTPUT),
            (re.compile(rf"^/jobs/{_JOB}/still\.png$"), self.still, Action.OUTPUT),
            (re.compile(rf"^/jobs/{_JOB}/package/{_PACKAGE_FILE}$"), self.package_file, out),
            (re.compile(r"^/static/(?P<name>hls\.min\.js|player\.js)$"), self.static, listed),
        ]

    def streams(self, path: str) -> bool:
        """Whether `path` answers as a stream (the API's events): farm.web.server writes those
        as they are made."""
        return self.api is not None and self.api.serves(path) and self.api.streams(path)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if self.api is not None and self.api.serves(path):
            return self.api(environ, start_response)
        length = environ.get("CONTENT_LENGTH", "") or "0"
        if not length.isdigit() or int(length) > PAGE_BODY_MAX_BYTES:
            start_response("413 Content Too Large", [("Content-Type", "text/plain")])
            return [f"farm: a page takes at most {PAGE_BODY_MAX_BYTES} bytes\n".encode()]
        if path in ("/login", "/logout"):
            return self._login(environ, start_response)
        try:
            known, actor = self._actor(environ)
        except FarmError as exc:  # the users' store does not answer
            log.warning("%s: %s", path, exc)
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"farm: {exc}\n".encode()]
        if not known:
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="farm"'), ("Content-Type", "text/plain"),
                 ("Cache-Control", "no-store")],
            )  # fmt: skip
            hint = "; or log in with your API token at /login" if self.api is not None else ""
            return [f"farm: credentials required{hint}\n".encode()]
        try:
            status, ctype, body, extra = self.route(path, actor)
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

    def route(self, path: str, actor: User | None = OPERATOR) -> Response:
        """The page at `path` for `actor` (OPERATOR: the basic-auth credentials, or a user
        logged in, who sees what their role may)."""
        for pattern, handler, action in self._routes:
            if match := pattern.match(path):
                found = match.groupdict()
                if actor is not None:
                    owner = self.ledger.job(found["job"]).get("owner", "") if "job" in found else ""
                    if not allowed(actor.role, action, owner=owner, user=actor.name):
                        log.warning("refused page %s to %s (%s)", path, actor.name, actor.role)
                        return self._forbidden(actor, action)
                return handler(actor, **found)
        return self._missing("no such page")

    def _forbidden(self, actor: User, action: Action) -> Response:
        what = f"{actor.name} ({actor.role}) may not see this: {action} of another's job"
        return "403 Forbidden", HTML, jobpage.not_found(what).encode(), []

    # ── who is asking ────────────────────────────────────────────────────────────────────────
    def _actor(self, environ: dict[str, Any]) -> tuple[bool, User | None]:
        """Whether the request is let in, and who asks: OPERATOR for the basic-auth
        credentials, else the user a valid session names."""
        if credentials_ok(environ.get("HTTP_AUTHORIZATION", ""), self.user, self.password):
            return True, OPERATOR
        value = session.from_cookies(environ.get("HTTP_COOKIE", ""))
        found = session.read(self._key, value) if value and self.api is not None else None
        if found is None:
            return False, None
        user = self._person(found.name)
        now = time.time()
        if (
            user is None
            or user.revoked is not None
            or (user.expires is not None and user.expires <= now)
            or user.created >= found.issued + 1  # the name was given a new token since
        ):
            return False, None
        return True, user

    def _person(self, name: str) -> User | None:
        """The user of that name as the store says, read again when 2 s old: a revoke ends the
        user's sessions as it ends their token."""
        read_at, people = self._people
        if time.monotonic() - read_at > 2.0:
            assert self.api is not None
            people = {u.name: u for u in self.api.farm.users.list()}
            self._people = (time.monotonic(), people)
        return people.get(name)

    def _login(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """GET /login: the form; POST /login: a token, answered with a session cookie and the
        job list, or the form again with why; /logout: the cookie dropped."""
        secure = environ.get("wsgi.url_scheme") == "https"
        headers = [("Content-Type", HTML), ("Cache-Control", "no-store"),
                   ("Content-Security-Policy", jobpage.login_policy())]  # fmt: skip
        if self.api is None:
            start_response("404 Not Found", headers)
            return [jobpage.not_found("this farm web serves no API, so no login").encode()]
        if environ.get("PATH_INFO") == "/logout":
            start_response("303 See Other", [("Location", "/login"), ("Content-Length", "0"),
                                             session.cookie_header("", secure=secure, max_age_s=0)])  # fmt: skip
            return [b""]
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD", "POST"):
            start_response("405 Method Not Allowed", [*headers, ("Allow", "GET, POST")])
            return [b""]
        if method != "POST":
            start_response("200 OK", headers)
            return [jobpage.login_page().encode()]
        length = int(environ.get("CONTENT_LENGTH", "") or 0)
        form = dict(parse_qsl(environ["wsgi.input"].read(length).decode("utf-8", "replace")))
        try:
            user = self.api.farm.users.authenticate(form.get("token", "").strip())
        except TokenRefused as exc:
            log.warning("refused login from %s: token %s (user %s)",
                        environ.get("REMOTE_ADDR", "?"), exc.reason, exc.name or "-")  # fmt: skip
            start_response("401 Unauthorized", headers)
            return [jobpage.login_page(str(exc)).encode()]
        except FarmError as exc:
            log.warning("login: %s", exc)
            start_response("503 Service Unavailable", headers)
            return [jobpage.login_page(f"{exc}; try again").encode()]
        value = session.issue(self._key, user.name, user.expires)
        log.info("%s (%s) logged in to the job pages from %s", user.name, user.role,
                 environ.get("REMOTE_ADDR", "?"))  # fmt: skip
        start_response("303 See Other", [("Location", "/"), ("Content-Length", "0"),
                                         ("Cache-Control", "no-store"),
                                         session.cookie_header(value, secure=secure)])  # fmt: skip
        return [b""]

    def _missing(self, what: str) -> Response:
        return "404 Not Found", HTML, jobpage.not_found(what).encode(), []

    # ── the pages: each is given who asks (OPERATOR, or a user let in by `route`) ────────────
    def metrics(self, actor: User | None) -> Response:
        return "200 OK", "text/plain; version=0.0.4; charset=utf-8", scrape(self._registry), []

    def jobs(self, actor: User | None) -> Response:
        rows = []
        for job_id in self.ledger.job_ids(100):
            job = self.ledger.job(job_id)
            if job:
                chunks = self.ledger.chunks(job_id)
                rows.append((job_summary(job, chunks), self._cost(job_id, job)))
        return "200 OK", HTML, jobpage.jobs_page(rows).encode(), []

    def job(self, actor: User | None, job: str) -> Response:
        record = self.ledger.job(job)
        if not record:
            return self._missing(f"no job {job}")
        owner = record.get("owner", "")
        files = actor is None or allowed(actor.role, Action.LOGS, owner=owner, user=actor.name)
        chunks = self.ledger.chunks(job)
        summary = job_summary(record, chunks) | chain(self.ledger, self.store, record)
        summary["siblings"] = siblings(self.ledger, record)  # farm submit --each
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
        have = set(frames)  # its preview frames first, for a person to judge (--preview)
        shown = [f for f in (summary.get("preview") or {}).get("frames", []) if f in have]
        html = jobpage.job_page(
            summary, chunk_times=times, thumbs=frames[-12:], logs=logs,
            cost=self._cost(job, record), now=time.time(), files=files, preview=shown,
        )  # fmt: skip
        return "200 OK", HTML, html.encode(), []

    def _cost(self, job_id: str, job: dict[str, str]) -> jobpage.Cost | None:
        """Spent and expected dollars, once an attempt is metered or running at a price."""
        spend = self.ledger.spend(job_id, job)
        if not spend.cost.attempts and not spend.running:
            return None
        return spend.spent, spend.spent + spend.expected_rest

    def thumb(self, actor: User | None, job: str, frame: str) -> Response:
        """The thumbnail of the frame as recorded: its record names the writer whose it is."""
        record = self.ledger.frame_records(job, [int(frame)]).get(int(frame))
        key = keys.thumb_key(job, int(frame), record.writer if record else None)
        size = self.store.size(key) if record else None
        if size is None or size > THUMB_MAX_BYTES:  # a scene's box wrote it: never read whole
            return self._missing(f"no thumbnail of frame {frame}")
        return "200 OK", "image/jpeg", self.store.get_bytes(key), []

    def log_text(self, actor: User | None, job: str, name: str) -> Response:
        key = keys.job_prefix(job) + "logs/" + name
        size = self.store.size(key) if _LOG_NAME.match(name) else None
        if size is None:
            return self._missing(f"no log {name}")
        if size <= LOG_MAX_BYTES:
            return "200 OK", "text/plain; charset=utf-8", self.store.get_bytes(key), []
        tail = self.store.get_range(key, size - LOG_MAX_BYTES, LOG_MAX_BYTES)[0]
        note = f"[the first {size - LOG_MAX_BYTES} bytes left out; `farm logs {job}` has them]\n"
        return "200 OK", "text/plain; charset=utf-8", note.encode() + tail, []

    def video(self, actor: User | None, job: str) -> Response:
        """A redirect to a short-lived presigned URL: the video never passes through here."""
        output = self.ledger.job(job).get("output", "")
        if not output:
            return self._missing(f"job {job} has no video yet")
        return "302 Found", "text/plain", b"", [("Location", self.store.presign_get(output, 600))]

    def still(self, actor: User | None, job: str) -> Response:
        """A tiled still's image (`--tiles`), PNG, served from here (the page's CSP lets images
        come from the farm alone); an EXR still is fetched with `farm fetch`."""
        output = self.ledger.job(job).get("output", "")
        size = self.store.size(output) if output.endswith(".png") else None
        if size is None or size > STILL_MAX_BYTES:
            return self._missing(f"job {job} has no still image to show")
        return "200 OK", "image/png", self.store.get_bytes(output), []

    def package_file(self, actor: User | None, job: str, name: str) -> Response:
        """A file of a ladder job's package (farm.media.package), served from here: hls.js reads
        the playlists and segments with fetch, which the page's CSP keeps to this origin."""
        prefix = self.ledger.job(job).get("package", "")
        size = self.store.size(prefix + name) if prefix else None
        if size is None or size > PACKAGE_FILE_MAX_BYTES:
            return self._missing(f"job {job} has no package file {name}")
        ctype = PACKAGE_TYPES[name.rsplit(".", 1)[1]]
        return "200 OK", ctype, self.store.get_bytes(prefix + name), []

    def static(self, actor: User | None, name: str) -> Response:
        """The job page's player (hls.js, vendored in farm/web/static)."""
        body = resources.files("farm.web").joinpath("static", name).read_bytes()
        return "200 OK", "text/javascript; charset=utf-8", body, []


PACKAGE_TYPES = {"m3u8": "application/vnd.apple.mpegurl", "mpd": "application/dash+xml",
                 "m4s": "video/iso.segment", "vtt": "text/vtt; charset=utf-8"}  # fmt: skip
PACKAGE_FILE_MAX_BYTES = 64 << 20
"""A 2 s segment at 200 Mbit/s is 50 MB; the server holds what it sends in memory."""
STILL_MAX_BYTES = 64 << 20
"""A 4K 16-bit RGBA PNG is at most about 66 MB; the server holds what it sends in memory."""
THUMB_MAX_BYTES = 4 << 20
"""A thumbnail is a few KiB; anything near this was not made by the farm's thumbnailer."""
LOG_MAX_BYTES = 4 << 20
"""The end of a longer log is shown: the page's server holds what it sends in memory."""
