"""What a route answers: a status and a JSON body (or a stream), and the API's error, which names
what went wrong and what to do, with a short code a client can act on."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from farm.core.errors import FarmError

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any = None
    """A JSON value, for every answer but a stream."""
    headers: tuple[tuple[str, str], ...] = ()
    stream: Iterable[bytes] | None = None
    """The body as it is made (server-sent events); `body` is then unused."""
    content_type: str = JSON


class ApiError(FarmError):
    """An answer other than success: `status`, `code` (token_missing, forbidden, too_large ...)
    and the message, which says what to do."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers
        self.extra = extra
        """More for a client to act on (the hashes still to upload), beside error and code."""
        self.who = ""
        """Whose request it was, where the answer is known before the user is (a refused
        token's record): for the log, never sent."""

    @property
    def answer(self) -> Answer:
        body = {"error": str(self), "code": self.code, **self.extra}
        return Answer(self.status, body, self.headers)


def bad_request(message: str, code: str = "bad_request") -> ApiError:
    return ApiError(400, code, message)
