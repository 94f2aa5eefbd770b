"""The client of the farm's HTTP API (version 1, farm.web.api): one method per route, the
presigned transfers and the server-sent events, so that an artist's machine holds a token and no
Redis or store secret.

Standard library only (urllib, ssl, json): the Blender add-on makes the same calls. The token goes
in the Authorization header and nowhere else: never in a URL, a log line or an error; presigned
URLs carry their own signature and are never logged either.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Generator, Iterator, Mapping
from email.message import Message
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from importlib import metadata
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlencode, urlsplit

from farm.adapters.api_answers import (
    APIError,
    APIUnreachable,
    BadRequest,
    ClientTooOld,
    Forbidden,
    JobNotFound,
    ServerError,
    TokenRejected,
    TransferError,
    parse_events,
    refusal,
    store_code,
)

__all__ = [
    "APIError",
    "APIUnreachable",
    "BadRequest",
    "ClientTooOld",
    "FarmAPI",
    "Forbidden",
    "JobNotFound",
    "ServerError",
    "TokenRejected",
    "TransferError",
    "client_version",
    "is_loopback",
    "parse_events",
]

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
BLOCK_BYTES = 1024 * 1024
"""What a presigned transfer reads or writes at a time: a multi-GB scene never sits in memory."""
ERROR_BODY_MAX = 64 * 1024
"""The most of an error's body read: the server's message is short; a proxy's page may not be."""
REQUEST_TIMEOUT_S = 60.0
LONG_TIMEOUT_S = 3600.0
"""POST /jobs hashes every staged upload and POST /estimate may run a probe job: minutes."""
EVENTS_TIMEOUT_S = 60.0
"""The events stream sends a keepalive every 15 s: a minute of silence is a dead connection."""


def client_version() -> str:
    """The farm package's version, which the server checks against its oldest allowed client."""
    try:
        return metadata.version("farm")
    except metadata.PackageNotFoundError:  # a copy of this module outside the package
        return "0.0.0"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would follow a redirect with the Authorization header, to wherever it points: an
    API that answers 3xx is refused instead, and the token stays with the host it was given to."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


class FarmAPI:
    """The farm's API at `url` (e.g. https://farm.example:8443, `farm web`'s address) as the user
    whose `token` this is; https verified against `ca_file` (empty: the system's CAs)."""

    def __init__(self, url: str, token: str, ca_file: str = "", *, version: str = "") -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.version = version or client_version()
        self._context = ssl.create_default_context(cafile=ca_file or None)
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self._context), _NoRedirect()
        )

    def __repr__(self) -> str:  # never the token
        return f"FarmAPI({self.url!r})"

    # --- the routes, in the contract's order -------------------------------------------------

    def server_version(self) -> dict[str, Any]:
        """GET /version: {"api", "farm", "min_client"}; needs no token."""
        return self._json("GET", "/version")

    def whoami(self) -> dict[str, Any]:
        return self._json("GET", "/whoami")

    def uploads(self, files: list[dict[str, Any]]) -> dict[str, Any]:
        """Which of `files` ({"sha256", "size", "kind", "suffix"}) the store lacks, each with a
        presigned PUT: {"stored": [sha256...], "uploads": [{"sha256", "url", "method", "headers"}]}."""
        return self._json("POST", "/uploads", {"files": files}, timeout_s=LONG_TIMEOUT_S)

    def submit(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST /jobs: the job queued from uploaded files; the answer `submit --json` prints."""
        return self._json("POST", "/jobs", body, timeout_s=LONG_TIMEOUT_S)

    def estimate(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json("POST", "/estimate", body, timeout_s=LONG_TIMEOUT_S)

    def jobs(self, limit: int = 20) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._json("GET", "/jobs?" + urlencode({"limit": limit}))[
            "jobs"
        ]
        return rows

    def job(self, job_id: str) -> dict[str, Any]:
        """The job's summary, as `farm status --json` prints it."""
        return self._json("GET", _job(job_id))

    def events(self, job_id: str) -> Generator[tuple[str, Any], None, None]:
        """The job's events as they come: `status` with its summary at once and at each change,
        `end` with the final one, then the stream closes. Close the generator to hang up."""
        path = _job(job_id, "events")
        with self._open("GET", path, None, EVENTS_TIMEOUT_S, "text/event-stream") as response:
            try:
                yield from parse_events(response)
            except (OSError, HTTPException) as exc:
                raise APIUnreachable(
                    f"the events of job {job_id} stopped coming ({_reason(exc)})"
                ) from None

    def pause(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", _job(job_id, "pause"), {})

    def resume(self, job_id: str, max_cost: float | None = None) -> dict[str, Any]:
        body = {} if max_cost is None else {"max_cost": max_cost}
        return self._json("POST", _job(job_id, "resume"), body)

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", _job(job_id, "cancel"), {})

    def retry(self, job_id: str, *, every_unfinished: bool = False) -> dict[str, Any]:
        return self._json("POST", _job(job_id, "retry"), {"every_unfinished": every_unfinished})

    def priority(self, job_id: str, priority: int) -> dict[str, Any]:
        return self._json("PUT", _job(job_id, "priority"), {"priority": priority})

    def output(
        self, job_id: str, *, frames: bool = False, version: int | None = None
    ) -> dict[str, Any]:
        """Presigned GETs (10 min) of the video ({"name", "url", "size"} or None; `version`: an
        earlier one, kept when frames were fixed) and, with `frames`, of each frame and the
        files the scene's File Output nodes wrote."""
        query = {"frames": 1} if frames else {}
        query |= {} if version is None else {"version": version}
        return self._json("GET", _job(job_id, "output") + ("?" + urlencode(query) if query else ""))

    def fix_frames(self, job_id: str, frames: str, reason: str = "") -> dict[str, Any]:
        """`farm retry --frames`: the job's status with `fix` (what was recorded) and `waiting`."""
        body = {"frames": frames, **({"reason": reason} if reason else {})}
        return self._json("POST", _job(job_id, "retry"), body)

    def logs(self, job_id: str, chunk: int | None = None) -> list[dict[str, Any]]:
        query = "" if chunk is None else "?" + urlencode({"chunk": chunk})
        found: list[dict[str, Any]] = self._json("GET", _job(job_id, "logs") + query)["logs"]
        return found

    def users(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._json("GET", "/users")["users"]
        return found

    def add_user(self, name: str, role: str, expires_days: float | None = None) -> dict[str, Any]:
        """{"name", "role", "token"}: the one time the new user's token is shown."""
        body: dict[str, Any] = {"name": name, "role": role}
        if expires_days is not None:
            body["expires_days"] = expires_days
        return self._json("POST", "/users", body)

    def revoke_user(self, name: str) -> dict[str, Any]:
        return self._json("DELETE", "/users/" + quote(name, safe=""))

    # --- presigned transfers -----------------------------------------------------------------

    def put_file(self, url: str, path: Path, headers: Mapping[str, str] | None = None) -> int:
        """PUT `path` to a presigned URL, read a block at a time; the bytes sent. Only the headers
        the API gave go with it, and its length: a query-string signature may cover the
        Content-Type, which urllib would set to a form's (so http.client, which adds none)."""
        size = path.stat().st_size
        sent = {**(headers or {}), "Content-Length": str(size)}
        parts = urlsplit(url)
        connection = (
            HTTPSConnection(parts.netloc, timeout=LONG_TIMEOUT_S, context=self._context)
            if parts.scheme == "https"
            else HTTPConnection(parts.netloc, timeout=LONG_TIMEOUT_S)
        )
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            with path.open("rb") as fh:
                connection.request("PUT", target, body=_blocks(fh), headers=sent)
            response = connection.getresponse()
            answer = response.read(ERROR_BODY_MAX)
        except (OSError, HTTPException) as exc:
            raise TransferError(
                f"uploading {path} failed ({_reason(exc)}); submit again (the files already "
                "sent are kept)"
            ) from None
        finally:
            connection.close()
        if response.status >= 300:
            raise TransferError(
                f"uploading {path} was refused ({response.status} "
                f"{store_code(answer) or response.reason}); submit again (the files already "
                "sent are kept)"
            )
        return size

    def get_file(self, url: str, dest: Path, size: int | None = None) -> int:
        """GET a presigned URL into `dest`, a block at a time, through a `.part` file beside it
        that becomes `dest` only when whole (`size`: the length the API listed)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(f".{dest.name}.part")
        got = 0
        try:
            with (
                self._opener.open(url, timeout=REQUEST_TIMEOUT_S) as response,
                part.open("wb") as fh,
            ):
                while block := response.read(BLOCK_BYTES):
                    fh.write(block)
                    got += len(block)
        except urllib.error.HTTPError as exc:
            part.unlink(missing_ok=True)
            raise TransferError(
                f"downloading {dest.name} was refused ({exc.code} {_store_reason(exc)}); "
                "fetch again (its link lasts 10 minutes)"
            ) from None
        except urllib.error.URLError as exc:
            part.unlink(missing_ok=True)
            raise TransferError(
                f"downloading {dest.name} failed ({_reason(exc)}); fetch again"
            ) from None
        except OSError:
            part.unlink(missing_ok=True)
            raise  # a DEST that cannot be written: the CLI names the file
        if size is not None and got != size:
            part.unlink(missing_ok=True)
            raise TransferError(
                f"downloading {dest.name} stopped at {got} of {size} bytes; fetch again"
            )
        os.replace(part, dest)
        return got

    def get_bytes(self, url: str, limit_bytes: int = 64 * 1024**2) -> bytes:
        """A small object (a chunk's log, which the farm caps) from a presigned URL."""
        try:
            with self._opener.open(url, timeout=REQUEST_TIMEOUT_S) as response:
                data: bytes = response.read(limit_bytes)
        except urllib.error.HTTPError as exc:
            raise TransferError(
                f"reading a file from the farm was refused ({exc.code} {_store_reason(exc)}); "
                "try again (its link lasts 10 minutes)"
            ) from None
        except (urllib.error.URLError, OSError, HTTPException) as exc:
            raise TransferError(f"reading a file from the farm failed ({_reason(exc)})") from None
        return data

    # --- requests -------------------------------------------------------------------------------

    def _json(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> dict[str, Any]:
        with self._open(method, path, body, timeout_s, "application/json") as response:
            try:
                raw = response.read()
            except (OSError, HTTPException) as exc:
                raise APIUnreachable(self._unreachable(exc)) from None
        try:
            found = json.loads(raw)
        except ValueError:
            found = None
        if isinstance(found, dict):
            return found
        raise APIError(
            f"the farm's API at {self.url} answered {method} {path.split('?')[0]} with "
            "something not a JSON object: is api_url `farm web`'s address?"
        )

    def _open(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        timeout_s: float,
        accept: str,
    ) -> HTTPResponse:
        headers = {
            "Authorization": f"Bearer {self._token}",
            "X-Farm-Client": self.version,
            "User-Agent": f"farm/{self.version}",
            "Accept": accept,
        }
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.url + API_PREFIX + path, data=data, method=method, headers=headers
        )
        try:
            response: HTTPResponse = self._opener.open(request, timeout=timeout_s)
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc, path) from None
        except (urllib.error.URLError, OSError) as exc:
            raise APIUnreachable(self._unreachable(exc)) from None
        return response

    def _refusal(self, exc: urllib.error.HTTPError, path: str) -> APIError:
        body = exc.read(ERROR_BODY_MAX) if exc.fp is not None else b""
        exc.close()
        return refusal(exc.code, str(exc.reason), body, url=self.url, path=path)

    def _unreachable(self, exc: BaseException) -> str:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, ssl.SSLCertVerificationError):
            return (
                f"the farm's API at {self.url} has a certificate this machine does not trust "
                f"({reason.verify_message}); give its CA: `farm login {self.url} --token TOKEN "
                "--ca-file CA.crt` (a local farm's is DATA/tls/ca.crt)"
            )
        return (
            f"no answer from the farm's API at {self.url} ({_reason(exc)}); check the address "
            "(`farm login URL`), or ask whoever runs the farm whether `farm web` is up"
        )


def _job(job_id: str, action: str = "") -> str:
    """A job's path, its id quoted: an id is never a way to another route."""
    return f"/jobs/{quote(job_id, safe='')}" + (f"/{action}" if action else "")


def _blocks(fh: IO[bytes]) -> Iterator[bytes]:
    while block := fh.read(BLOCK_BYTES):
        yield block


def _reason(exc: BaseException) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return "timed out"
    return str(getattr(reason, "strerror", None) or reason)


def _store_reason(exc: urllib.error.HTTPError) -> str:
    """The store's error code from its XML body (`SignatureDoesNotMatch`, `AccessDenied`), or
    the status's reason; never the URL, which carries a signature."""
    raw = exc.read(ERROR_BODY_MAX) if exc.fp is not None else b""
    exc.close()
    return store_code(raw) or str(exc.reason)


def is_loopback(url: str) -> bool:
    """Whether `url` names this machine: the only place a plain http API keeps a token private."""
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")
