"""What work the broker still holds: chunk and stitch messages read out of kombu's Redis lists
(pure parsing; the ledger reads the raw messages).

kombu's Redis transport keeps each queue as lists (one per priority step) of JSON envelopes of
Celery protocol 2 messages: the task name and `kwargsrepr` are in the headers, the kwargs in the
base64 body. Delivered but unacknowledged messages (a worker's current task, or one held for its
countdown) sit in the `unacked` hash as [envelope, exchange, routing key].
"""

from __future__ import annotations

import ast
import base64
import json
from collections.abc import Iterable
from typing import Any

UNACKED = "unacked"
"""kombu's hash of delivered, unacknowledged messages (its default `unacked_key`)."""

Work = tuple[str, str, int]
"""(task name, job id, chunk index; -1 for a job's stitch)."""


def priority_lists(queue: str) -> list[str]:
    """The Redis lists of a queue: the plain name (step 0) and kombu's suffixed steps 1..9."""
    return [queue] + [f"{queue}\x06\x16{p}" for p in range(1, 10)]


def _kwargs(envelope: dict[str, Any]) -> dict[str, Any]:
    try:
        body = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        decoded = json.loads(body)
        if isinstance(decoded, list) and len(decoded) >= 2 and isinstance(decoded[1], dict):
            return decoded[1]
    except (KeyError, TypeError, ValueError):
        pass
    # The body could not be read (another serializer): Celery's repr of the kwargs.
    parsed = ast.literal_eval(str(envelope.get("headers", {}).get("kwargsrepr") or "{}"))
    return parsed if isinstance(parsed, dict) else {}


def message_work(raw: bytes | str) -> Work | None:
    """The work a broker message carries, or None for anything that is not a farm task."""
    try:
        envelope = json.loads(raw)
        if isinstance(envelope, list):  # an `unacked` entry: [envelope, exchange, routing key]
            envelope = envelope[0]
        task = str(envelope["headers"]["task"])
        kwargs = _kwargs(envelope)
        return task, str(kwargs["job_id"]), int(kwargs.get("chunk", -1))
    except (KeyError, TypeError, ValueError, IndexError, SyntaxError):
        return None


def queued_work(raw_messages: Iterable[bytes | str]) -> set[Work]:
    return {work for raw in raw_messages if (work := message_work(raw)) is not None}
