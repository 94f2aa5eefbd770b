"""The claim a task's thread holds. Its token travels with the thread, never re-read from Redis:
an error handler must only ever move the chunk it claimed, not a newer attempt's."""

from __future__ import annotations

import threading

_local = threading.local()


def hold(token: str) -> None:
    _local.token = token


def held() -> str:
    """This thread's claim token, or '' when the task never claimed its chunk."""
    token: str = getattr(_local, "token", "")
    return token


def release() -> None:
    _local.token = ""
