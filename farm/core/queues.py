"""The broker's queues (pure): what each project's queues are called, and what work the broker
still holds, read out of kombu's Redis lists (the ledger reads the raw messages).

Fair share between projects is kombu's own round robin: a worker's Redis channel BRPOPs its
queues priority step first, then queue, and moves the queue it just took a message from to the
end of its list (kombu.transport.redis `_brpop_start`, `_queue_cycle.rotate`). So each project
has its own queues per phase, `render.p.<project>.<lane>`, one lane per unit of weight, and a
worker that consumes them all takes turns between the projects that have work, weight 2 taking
two turns to weight 1's one. Jobs of no project stay on the phase's own queue (`render`), which
takes its turn like one project of weight 1 (docs/design/scheduling.md).

kombu's Redis transport keeps each queue as lists (one per priority step) of JSON envelopes of
Celery protocol 2 messages: the task name and `kwargsrepr` are in the headers, the kwargs in the
base64 body. Delivered but unacknowledged messages (a worker's current task, or one held for its
countdown) sit in the `unacked` hash as [envelope, exchange, routing key].
"""

from __future__ import annotations

import ast
import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from farm.core.pipeline import Queue

UNACKED = "unacked"
"""kombu's hash of delivered, unacknowledged messages (its default `unacked_key`)."""

Work = tuple[str, str, int]
"""(task name, job id, chunk index; -1 for a job's stitch)."""


PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
"""A project's name: safe in a queue name, a Redis key, a store key and a URL as it is (no '.',
which separates a project queue's parts)."""
MAX_WEIGHT = 8
"""A weight is that many lanes (queues) per phase; each lane costs every worker one more list
per priority step in each BRPOP, so weights stay small integers."""
_MARK = ".p."
"""Between a phase's queue and a project's name in a project queue (`render.p.spring.0`)."""


def check_project_name(name: str) -> str | None:
    """Why `name` cannot name a project, or None when it can."""
    if PROJECT_NAME.fullmatch(name):
        return None
    return (
        f"{name!r} is not a project name: use 1 to 32 lowercase letters, digits or '-', "
        "starting with a letter or a digit"
    )


def project_queue(queue: str, project: str, lane: int) -> str:
    """The queue of `project`'s work for `queue`'s phase in one of its lanes."""
    return f"{queue}{_MARK}{project}.{lane}"


def lane_of(chunk: int, weight: int) -> int:
    """The lane a chunk's message goes to: a job's chunks spread over the project's lanes in
    turn, so each lane holds an even part of the project's work. A job's stitch (chunk -1) goes
    to lane 0."""
    return max(chunk, 0) % max(weight, 1)


def route(queue: str, project: str, weight: int, chunk: int) -> str:
    """Where a job's message for `queue`'s phase goes: the phase's own queue for a job of no
    project, else the project's lane for the chunk."""
    if not project:
        return queue
    return project_queue(queue, project, lane_of(chunk, weight))


def phase_queue(name: str) -> str:
    """The phase queue a queue serves (`render` for `render.p.spring.1` and for `render`)."""
    return name.split(_MARK, 1)[0]


def project_of(name: str) -> str:
    """The project a queue belongs to ('' for a phase's own queue)."""
    _, mark, rest = name.partition(_MARK)
    return rest.rsplit(".", 1)[0] if mark else ""


def project_queues(queue: str, lanes: Mapping[str, int]) -> list[str]:
    """Every lane of every project (`lanes`: project -> lanes) for `queue`'s phase."""
    return [
        project_queue(queue, project, lane)
        for project in sorted(lanes)
        for lane in range(max(lanes[project], 1))
    ]


def consumed(queues: Sequence[str], lanes: Mapping[str, int]) -> list[str]:
    """What a worker serving the phase queues `queues` consumes: those, and each project's lanes
    of each of them (a queue named already, or a project's own, is left as it is)."""
    found = list(dict.fromkeys(queues))
    for queue in queues:
        if phase_queue(queue) == queue and queue in set(Queue):
            found += [q for q in project_queues(queue, lanes) if q not in found]
    return found


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
