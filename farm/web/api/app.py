"""FarmAPI: the WSGI app that serves the routes table (farm.web.api.routes). Each request goes
through the same gates in order: a route (404/405), the client's version (426), the token (401),
the body's size (413) and JSON (400), the job it names (404) and the role's right to act on it
(403); then its handler. Every refusal is logged with the user where known, the route, the
reason and the remote address, never the token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control.users import TokenRefused, User, Users
from farm.core.access import allowed, roles_allowed
from farm.core.errors import FarmError, SpecError, StoreError, UnknownJob, UnreachableError
from farm.ledger import Ledger
from farm.web.api import openapi, people, steering, submits
from farm.web.api.answers import JSON, Answer, ApiError, bad_request
from farm.web.api.call import Call, Farm, Handler
from farm.web.api.routes import Route, find, streams
from farm.web.api.versions import FARM_VERSION, MIN_CLIENT, too_old, upgrade_message

log = logging.getLogger(__name__)
StartResponse = Callable[..., Any]

HANDLERS: dict[str, Handler] = {
    "version": people.version,
    "whoami": people.whoami,
    "uploads": submits.upload_offer,
    "submit": submits.submit,
    "estimate": submits.estimate,
    "list_jobs": submits.list_jobs,
    "read_job": submits.read_job,
    "events": submits.events,
    "pause": steering.pause,
    "resume": steering.resume,
    "cancel": steering.cancel,
    "retry": steering.retry,
    "priority": steering.priority,
    "output": steering.output,
    "logs": steering.logs,
    "list_users": people.list_users,
    "add_user": people.add_user,
    "revoke_user": people.revoke_user,
}
"""Each route's handler by the route's name (the OpenAPI document is the app's own)."""
_BEARER = (("WWW-Authenticate", 'Bearer realm="farm"'),)
_REFUSALS = {400, 401, 403, 404, 405, 409, 413, 426}


class FarmAPI:
    """The API on `farm`'s ledger, store and users (from_settings: the web process's own)."""

    def __init__(self, farm: Farm) -> None:
        self.farm = farm

    @classmethod
    def from_settings(cls, settings: Settings) -> FarmAPI:
        store = Store.from_settings(settings)
        ledger = Ledger.from_url(settings.redis_url)
        return cls(Farm(settings=settings, ledger=ledger, store=store, users=Users(store)))

    @staticmethod
    def serves(path: str) -> bool:
        """Whether `path` is the API's (farm.web.app hands it every such request)."""
        return path == "/openapi.json" or path == "/api" or path.startswith("/api/")

    @staticmethod
    def streams(path: str) -> bool:
        """Whether `path` answers as a stream (farm.web.server writes it as it is made)."""
        return streams(path)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        user: User | None = None
        who = ""
        try:
            route, params, methods = find(method, path)
            if route is None:
                if methods:
                    raise ApiError(405, "method_not_allowed",
                                   f"{path} takes {', '.join(methods)}, not {method}",
                                   (("Allow", ", ".join(methods)),))  # fmt: skip
                raise ApiError(404, "no_route", f"no route {path}; GET /openapi.json lists them")
            _check_client(environ)
            if route.action is not None:
                user = self._authenticate(environ)
            call = Call(
                route=route, user=user, params=params, body=_body(environ, route),
                query=dict(parse_qsl(environ.get("QUERY_STRING", ""))),
                server_url=_server_url(environ),
            )  # fmt: skip
            answer = self._answer(call)
        except ApiError as exc:
            answer, who = exc.answer, exc.who
        except SpecError as exc:
            answer = ApiError(400, "bad_request", str(exc)).answer
        except UnknownJob as exc:
            answer = ApiError(404, "unknown_job", str(exc)).answer
        except (UnreachableError, StoreError) as exc:  # not LedgerError: a refusal of a state
            log.warning("%s %s: %s", method, path, exc)
            answer = ApiError(503, "unavailable", f"{exc}; try again").answer
        except FarmError as exc:  # a job not in a state this applies to, said by farm.control
            answer = ApiError(409, "conflict", str(exc)).answer
        if answer.status in _REFUSALS:
            _log_refusal(environ, method, path, user.name if user else who, answer)
        return _respond(answer, method, start_response)

    def _authenticate(self, environ: dict[str, Any]) -> User:
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401, "token_missing",
                "this API takes a token: send `Authorization: Bearer <token>` (an admin makes "
                "one with `farm user add NAME --role artist`; `farm login URL --token T` keeps it)",
                _BEARER,
            )  # fmt: skip
        try:
            return self.farm.users.authenticate(token.strip())
        except TokenRefused as exc:
            refused = ApiError(401, f"token_{exc.reason}", str(exc), _BEARER)
            refused.who = exc.name  # for the log: the record's name, never the token
            raise refused from exc

    def _answer(self, call: Call) -> Answer:
        route, user = call.route, call.user
        if route.name == "openapi":
            return Answer(200, openapi.document(FARM_VERSION, call.server_url))
        if route.on_job:
            job = self.farm.ledger.job(call.job_id)
            if not job:
                raise UnknownJob(call.job_id)
            call = Call(route=route, user=user, params=call.params, query=call.query,
                        body=call.body, job=job, server_url=call.server_url)  # fmt: skip
        if route.action is not None and user is not None:
            owner = call.job.get("owner", "")
            if not allowed(user.role, route.action, owner=owner, user=user.name):
                raise ApiError(403, "forbidden", _forbidden(route, user, owner, call))
        return HANDLERS[route.name](self.farm, call)


def _forbidden(route: Route, user: User, owner: str, call: Call) -> str:
    """Who may instead, and, on a job, whose it is."""
    may = " or ".join(str(r) for r in roles_allowed(route.action)) if route.action else ""
    if not route.on_job:
        return f"{user.name} ({user.role}) may not {route.action}: only a {may} may"
    whose = f"{owner}'s job" if owner else "a job that records no owner"
    return (
        f"{user.name} ({user.role}) may not {route.action} job {call.job_id}, {whose}: an "
        f"{user.role} may on their own jobs only; a {may} may on any (ask one, or the owner)"
    )


def _check_client(environ: dict[str, Any]) -> None:
    """426 for a client (X-Farm-Client) older than MIN_CLIENT; none given (curl) is let in."""
    client = environ.get("HTTP_X_FARM_CLIENT", "").strip()
    if not client:
        return
    try:
        old = too_old(client)
    except ValueError:
        raise bad_request(
            f"X-Farm-Client {client[:40]!r} is not a version like {MIN_CLIENT}"
        ) from None
    if old:
        raise ApiError(426, "client_too_old", upgrade_message(), (("Upgrade", "farm"),))


def _body(environ: dict[str, Any], route: Route) -> dict[str, Any]:
    """The request's JSON object ({} for none), read whole only when within the route's limit."""
    limit = route.body_max_bytes
    text = environ.get("CONTENT_LENGTH", "") or "0"
    if not text.isdigit():
        raise bad_request("Content-Length is not a number")
    if int(text) > limit:
        raise ApiError(413, "too_large", _too_large(route, limit))
    data = environ["wsgi.input"].read(limit + 1) if int(text) else b""
    if len(data) > limit:
        raise ApiError(413, "too_large", _too_large(route, limit))
    if not data.strip():
        return {}
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        raise bad_request("the body is not JSON", "bad_json") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object", "bad_json")
    return body


def _too_large(route: Route, limit: int) -> str:
    size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
    return f"the body of {route.method} {route.path} may be at most {size} ({limit} bytes)"


def _server_url(environ: dict[str, Any]) -> str:
    host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
    return f"{environ.get('wsgi.url_scheme', 'http')}://{host}" if host else ""


def _log_refusal(environ: dict[str, Any], method: str, path: str, who: str, answer: Answer) -> None:
    """One line per refusal: who (where known), what, why and from where; never the token (a
    refused token's user is named by the store's record, not by the token)."""
    code = answer.body.get("code", "") if isinstance(answer.body, dict) else ""
    shown = path.encode("unicode_escape").decode()  # a path's newline forges no line of the log
    log.warning(
        "refused %s %s from %s: %d %s (user %s)",
        method[:16], shown[:300], environ.get("REMOTE_ADDR", "?"), answer.status, code, who or "-",
    )  # fmt: skip


def _respond(answer: Answer, method: str, start_response: StartResponse) -> Iterable[bytes]:
    status = f"{answer.status} {HTTPStatus(answer.status).phrase}"
    headers = [("Content-Type", answer.content_type), ("Cache-Control", "no-store"),
               ("X-Content-Type-Options", "nosniff"), *answer.headers]  # fmt: skip
    if answer.stream is not None:
        start_response(status, headers)
        return [] if method == "HEAD" else answer.stream
    body = b"" if answer.body is None else json.dumps(answer.body).encode()
    if answer.content_type == JSON:
        headers.append(("Content-Length", str(len(body))))
    start_response(status, headers)
    return [] if method == "HEAD" else [body]
