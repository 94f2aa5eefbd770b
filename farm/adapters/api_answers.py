"""What the farm's API answers mean to its client (farm.adapters.farmapi): each refusal as the
FarmError the caller can tell apart, carrying the server's own words; the events stream as
(event, data); the store's code in a refused presigned transfer. Pure: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from farm.core.errors import FarmError, SpecError, TransientError, UnknownJob


class APIError(FarmError):
    """The API refused or failed a request; the message is the server's own, which says what
    to do. `status`: the HTTP status; `code`: the contract's short name (`forbidden`, ...)."""

    def __init__(self, message: str, *, status: int = 0, code: str = "") -> None:
        FarmError.__init__(self, message)
        self.status = status
        self.code = code


class TokenRejected(APIError):
    """401: no token, or one the farm does not know, has expired or has revoked."""


class Forbidden(APIError):
    """403: the token's user may not do this (an artist and another user's job)."""


class ClientTooOld(APIError):
    """426: this farm's API needs a newer farm package; the message says which to install."""


class BadRequest(APIError, SpecError):
    """400 or 413: the request itself is wrong (a spec the server refuses, a body over its
    limit); bad input, so the CLI exits 2 as for a SpecError."""


class JobNotFound(APIError, UnknownJob):
    """404 for a job id the farm does not know (the CLI exits 2, as for UnknownJob)."""

    def __init__(
        self, message: str, *, status: int = 404, code: str = "", job_id: str = ""
    ) -> None:
        APIError.__init__(self, message, status=status, code=code)
        self.job_id = job_id


class ServerError(APIError, TransientError):
    """5xx: the server failed; trying again later may work."""


class APIUnreachable(TransientError):
    """No answer at api_url (refused, timed out, a certificate this machine does not trust)."""


class TransferError(FarmError):
    """A presigned upload or download failed; the message names the file, never the URL."""


def refusal(status: int, reason: str, body: bytes, *, url: str, path: str) -> APIError:
    """The error for an answer of `status` with `body` ({"error", "code"}) to `path` of the API
    at `url`: the server's own message (a 401's with how to log in again), or, where the body is
    not the farm's (a proxy's page), one that says to check the address."""
    try:
        found = json.loads(body)
        message, code = str(found["error"]), str(found.get("code", ""))
    except (ValueError, KeyError, TypeError):
        message, code = "", ""
    if not message:
        message = (
            f"the farm's API at {url} answered {status} {reason}; is api_url `farm web`'s address?"
        )
    if status == 401:
        return TokenRejected(
            f"{message.rstrip('.')}; then log in again: `farm login {url} --token TOKEN`",
            status=status,
            code=code,
        )
    if status == 404 and code == "unknown_job":
        parts = path.split("?")[0].split("/")  # /jobs/{id}/...
        return JobNotFound(message, code=code, job_id=parts[2] if len(parts) > 2 else "")
    kind = KINDS.get(status, ServerError if status >= 500 else APIError)
    return kind(message, status=status, code=code)


KINDS: dict[int, type[APIError]] = {
    400: BadRequest,
    403: Forbidden,
    413: BadRequest,
    426: ClientTooOld,
}
"""The refusals a caller tells apart by kind; other 4xx are APIError, 5xx ServerError."""


def parse_events(lines: Iterable[bytes]) -> Iterator[tuple[str, Any]]:
    """Server-sent events from the stream's lines: (event, data), data decoded from JSON where it
    is JSON. Comments (`: keepalive`) are skipped; several `data:` lines join with newlines; an
    event without a name is a `message` (the text/event-stream format)."""
    event, data = "", list[str]()
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                text = "\n".join(data)
                try:
                    value: Any = json.loads(text)
                except ValueError:
                    value = text
                yield event or "message", value
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value_text = line.partition(":")
        value_text = value_text.removeprefix(" ")
        if name == "event":
            event = value_text
        elif name == "data":
            data.append(value_text)


def store_code(raw: bytes) -> str:
    """The store's error code in its XML answer (`SignatureDoesNotMatch`, `AccessDenied`), or ""."""
    text = raw.decode("utf-8", "replace")
    start, end = text.find("<Code>"), text.find("</Code>")
    return text[start + len("<Code>") : end] if 0 <= start < end else ""
