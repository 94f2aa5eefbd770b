"""The people who may use the farm's API and their tokens. The store is the record: one object per
user at users/<name>.json (farm.core.keys.user_key) with their role, when it was made, expires and
was revoked, and their token's sha256. The token itself is shown once, when the user is added, and
kept nowhere.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from farm.adapters.store import Store
from farm.core import keys
from farm.core.access import UserRole
from farm.core.errors import FarmError, ObjectMissing

log = logging.getLogger(__name__)

TOKEN_PREFIX = "farm_"
"""Every token starts so: a secret scanner (and a person) can tell a farm token on sight."""
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
"""A user name: safe in a store key, a log line and a URL path as it is."""
MISS_INTERVAL_S = 0.5
"""An unknown token reloads every user from the store at most this often: a token added by
another process is found within it, and a flood of made-up tokens costs the store no more."""


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    name: str
    role: UserRole
    created: float
    """Unix seconds."""
    expires: float | None
    """Unix seconds after which the token is refused; None: never."""
    revoked: float | None
    """Unix seconds when the token was revoked; None: it was not."""

    def to_json(self) -> dict[str, Any]:
        """The user as `farm user list --json` and the API show them: never a token or a hash."""
        return {"name": self.name, "role": str(self.role), "created": self.created,
                "expires": self.expires, "revoked": self.revoked}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> User:
        """A user as to_json shows them (the API's answers)."""
        return cls(
            name=str(data["name"]),
            role=UserRole(str(data["role"])),
            created=float(data["created"]),
            expires=None if data.get("expires") is None else float(data["expires"]),
            revoked=None if data.get("revoked") is None else float(data["revoked"]),
        )


class Refusal(StrEnum):
    """Why a token was refused."""

    UNKNOWN = "unknown"
    """No user holds it: mistyped, cut short, or from another farm."""
    EXPIRED = "expired"
    """Its user's expiry has passed."""
    REVOKED = "revoked"
    """An admin revoked it."""


class TokenRefused(FarmError):
    """A token the farm will not take; `reason` says why (a Refusal), `name` whose it was when
    the farm knows ("" for an unknown token). The message never holds the token."""

    def __init__(self, reason: str, message: str, name: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.name = name

    def __reduce__(self) -> tuple[type[TokenRefused], tuple[str, str, str]]:
        return (TokenRefused, (self.reason, str(self), self.name))


class UnknownUser(FarmError):
    """No user of that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no user {name}; `farm user list` lists the farm's users")
        self.name = name

    def __reduce__(self) -> tuple[type[UnknownUser], tuple[str]]:
        return (UnknownUser, (self.name,))


class NameInUse(FarmError):
    """A user of that name holds a token that was not revoked."""


class BadUserInput(FarmError):
    """A user name, role or expiry the farm cannot take: fix it and ask again."""


def token_sha256(token: str) -> str:
    """What the store keeps of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise BadUserInput(
            f"{name!r} is not a user name: use 1 to 64 lowercase letters, digits, '.', '_' or "
            "'-', starting with a letter or a digit"
        )
    return name


def _when(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True, slots=True)
class _Known:
    """A user as the store held them when last read (`read_at`, on the monotonic clock)."""

    user: User
    sha256: str
    read_at: float


class Users:
    """The farm's users in `store`. authenticate() keeps what it read by token hash and reads a
    user again once that is `ttl_s` old, so a revoke made anywhere holds within `ttl_s`; a token
    it does not know reloads every user, at most once per MISS_INTERVAL_S. `clock`: monotonic
    seconds, for the cache's ages. Safe to share between threads."""

    def __init__(
        self, store: Store, *, ttl_s: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, _Known] = {}
        self._reloaded_at = -math.inf

    # ── Admin's work ───────────────────────────────────────────────────────────────────────
    def add(
        self, name: str, role: UserRole | str, *, expires_days: float | None = None
    ) -> tuple[User, str]:
        """A new user and their token, which is returned this once and kept nowhere. A name is
        refused while a user of that name holds a token not revoked; a revoked name may be
        given again, with a new token."""
        check_name(name)
        try:
            role = UserRole(role)
        except ValueError:
            raise BadUserInput(
                f"{role!r} is not a role: choose one of {', '.join(UserRole)}"
            ) from None
        if expires_days is not None and not (math.isfinite(expires_days) and expires_days > 0):
            raise BadUserInput(
                f"expires_days {expires_days} is not a number of days above 0 (leave it out for "
                "a token that does not expire)"
            )
        found = self._read(name)
        if found is not None and found[0].revoked is None:
            raise NameInUse(
                f"user {name} exists ({found[0].role}); `farm user revoke {name}` first to give "
                "the name a new token, or choose another name"
            )
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        expires = None if expires_days is None else now + expires_days * 86400
        user = User(name=name, role=role, created=now, expires=expires, revoked=None)
        self._write(user, token_sha256(token))
        log.info("added user %s (%s)", name, role)
        return user, token

    def list(self) -> list[User]:
        """Every user the store holds, revoked ones too, by name."""
        return sorted((user for user, _ in self._read_all()), key=lambda u: u.name)

    def revoke(self, name: str) -> User:
        """Refuse `name`'s token from now on (here at once; in other processes within their
        `ttl_s`). The record stays, so the token is refused as revoked, not unknown. Revoking a
        revoked user changes nothing."""
        found = self._read(name) if NAME.fullmatch(name) else None
        if found is None:
            raise UnknownUser(name)
        user, sha256 = found
        if user.revoked is not None:
            return user
        revoked = User(name=user.name, role=user.role, created=user.created,
                       expires=user.expires, revoked=time.time())  # fmt: skip
        self._write(revoked, sha256)
        log.info("revoked user %s", name)
        return revoked

    # ── Every request's work ───────────────────────────────────────────────────────────────
    def authenticate(self, token: str) -> User:
        """The user whose token this is; TokenRefused (unknown, expired or revoked) else."""
        digest = token_sha256(token) if token.startswith(TOKEN_PREFIX) else ""
        known = self._lookup(digest) if digest else None
        # The table is keyed by the hash: a hash's timing tells nothing of the token, but the
        # record's own hash is compared in constant time all the same.
        if known is None or not hmac.compare_digest(known.sha256, digest):
            raise TokenRefused(
                Refusal.UNKNOWN,
                "this token is not one of this farm's: check it was copied whole, or ask an "
                "admin for one (`farm user add NAME --role artist`)",
            )
        user = known.user
        if user.revoked is not None:
            raise TokenRefused(
                Refusal.REVOKED,
                f"the token of {user.name} was revoked at {_when(user.revoked)}; ask an admin "
                "for a new one",
                user.name,
            )
        if user.expires is not None and user.expires <= time.time():
            raise TokenRefused(
                Refusal.EXPIRED,
                f"the token of {user.name} expired at {_when(user.expires)}; ask an admin for a "
                f"new one (`farm user revoke {user.name}`, then `farm user add {user.name}`)",
                user.name,
            )
        return user

    def _lookup(self, digest: str) -> _Known | None:
        """The user holding the token hashed `digest`, read again from the store when what is
        kept is `ttl_s` old; every user reloaded for a hash not kept, at most once per
        MISS_INTERVAL_S. The lock holds one reload at a time however many requests miss."""
        with self._lock:
            now = self._clock()
            known = self._known.get(digest)
            if known is None:
                if now - self._reloaded_at < MISS_INTERVAL_S:
                    return None
                self._reloaded_at = now  # before reading: a failing store is not asked more
                self._known = {sha: _Known(user, sha, now) for user, sha in self._read_all()}
                return self._known.get(digest)
            if now - known.read_at < self._ttl_s:
                return known
            found = self._read(known.user.name)
            if found is None or not hmac.compare_digest(found[1], digest):
                del self._known[digest]  # the name was given a new token since
                return None
            known = self._known[digest] = _Known(found[0], digest, now)
            return known

    # ── The store ──────────────────────────────────────────────────────────────────────────
    def _write(self, user: User, sha256: str) -> None:
        record = {**user.to_json(), "token_sha256": sha256}
        self._store.put_json(keys.user_key(user.name), record)
        with self._lock:  # this process sees its own change at once
            self._known = {sha: k for sha, k in self._known.items() if k.user.name != user.name}
            self._known[sha256] = _Known(user, sha256, self._clock())

    def _read(self, name: str) -> tuple[User, str] | None:
        try:
            data = self._store.get_json(keys.user_key(name))
        except ObjectMissing:
            return None
        except (ValueError, UnicodeDecodeError):  # not JSON: no one's record
            log.warning("%s is not a user record; it is ignored", keys.user_key(name))
            return None
        return _parsed(data, name)

    def _read_all(self) -> builtins.list[tuple[User, str]]:
        found: builtins.list[tuple[User, str]] = []
        for key in self._store.keys(keys.USERS_PREFIX):
            name = key.removeprefix(keys.USERS_PREFIX).removesuffix(".json")
            if not key.endswith(".json") or not NAME.fullmatch(name):
                continue
            try:
                data = self._store.get_json(key)
            except ObjectMissing:  # gone since the listing
                continue
            except (ValueError, UnicodeDecodeError):  # not JSON: it locks no one else out
                log.warning("%s is not a user record; it is ignored", key)
                continue
            if (parsed := _parsed(data, name)) is not None:
                found.append(parsed)
        return found


def _parsed(data: Any, name: str) -> tuple[User, str] | None:
    """A record read back, with its token's hash; None (and a warning) for one that is not a
    user record of that name, which then authenticates no one."""
    try:
        if not isinstance(data, Mapping):
            raise TypeError(f"a {type(data).__name__}, not an object")
        user = User(
            name=str(data["name"]),
            role=UserRole(data["role"]),
            created=float(data["created"]),
            expires=None if data.get("expires") is None else float(data["expires"]),
            revoked=None if data.get("revoked") is None else float(data["revoked"]),
        )
        sha256 = str(data["token_sha256"])
    except (KeyError, TypeError, ValueError):
        log.warning("%s is not a user record; it is ignored", keys.user_key(name))
        return None
    if user.name != name:
        log.warning("%s names another user (%s); it is ignored", keys.user_key(name), user.name)
        return None
    return user, sha256
