"""The job pages' login session: a cookie naming a user, when it was issued and when it ends,
signed with HMAC-SHA256. It holds no token and no secret: a token is shown once at /login and
checked there, and the cookie stands for it until it ends or the user is revoked.

The key is derived from the farm's Flower password (which every `farm web` of a farm holds, and
which its basic auth already rests on), so several web processes agree on a session, and a new
password ends every session.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

COOKIE = "farm_session"
SESSION_S = 12 * 3600
"""A login lasts a working day (or until the token's own expiry, if sooner)."""


def session_key(farm_secret: str) -> bytes:
    return hmac.new(farm_secret.encode(), b"farm web session v1", hashlib.sha256).digest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    name: str
    issued: float
    """Unix seconds: a user added again after this (a new token) is not this session's."""
    expires: float


def _sign(key: bytes, payload: str) -> str:
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()


def issue(key: bytes, name: str, token_expires: float | None, now: float | None = None) -> str:
    """The cookie's value for `name`, ending after SESSION_S or at the token's expiry."""
    now = time.time() if now is None else now
    ends = now + SESSION_S if token_expires is None else min(now + SESSION_S, token_expires)
    payload = f"{name}:{int(now)}:{int(ends)}"
    return f"{payload}:{_sign(key, payload)}"


def read(key: bytes, value: str, now: float | None = None) -> Session | None:
    """The session a cookie's value stands for, or None: not signed with `key`, malformed, or
    ended."""
    payload, _, signature = value.rpartition(":")
    name, _, times = payload.partition(":")
    issued, _, expires = times.partition(":")
    if not (name and issued.isdigit() and expires.isdigit()):
        return None
    if not hmac.compare_digest(signature.encode(), _sign(key, payload).encode()):
        return None
    if int(expires) <= (time.time() if now is None else now):
        return None
    return Session(name=name, issued=float(issued), expires=float(expires))


def cookie_header(value: str, *, secure: bool, max_age_s: int = SESSION_S) -> tuple[str, str]:
    """Set-Cookie for the session: never read by a script, never sent from another site, over
    https only where the farm serves https."""
    attributes = f"Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict"
    return "Set-Cookie", f"{COOKIE}={value}; {attributes}{'; Secure' if secure else ''}"


def from_cookies(header: str) -> str:
    """The session cookie's value in a Cookie header, or ''."""
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return ""
