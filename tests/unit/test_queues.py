"""Reading the work a broker message carries (Celery protocol 2 in kombu's Redis envelope)."""

from __future__ import annotations

import base64
import json

from farm.core.queues import message_work, queued_work


def envelope(task: str, kwargs: dict[str, object], *, body: bool = True) -> str:
    raw = base64.b64encode(json.dumps([[], kwargs, {}]).encode()).decode() if body else "!"
    return json.dumps({
        "body": raw,
        "headers": {"task": task, "kwargsrepr": repr(kwargs)},
        "properties": {"body_encoding": "base64"},
    })  # fmt: skip


def test_a_chunk_message_names_its_task_job_and_chunk() -> None:
    raw = envelope("farm.render", {"job_id": "j1", "chunk": 7})
    assert message_work(raw) == ("farm.render", "j1", 7)


def test_a_stitch_message_is_chunk_minus_one_and_unacked_entries_are_read() -> None:
    unacked = json.dumps([json.loads(envelope("farm.stitch", {"job_id": "j1"})), "", "stitch"])
    assert message_work(unacked) == ("farm.stitch", "j1", -1)


def test_an_unreadable_body_falls_back_to_kwargsrepr() -> None:
    raw = envelope("farm.render", {"job_id": "j2", "chunk": 3}, body=False)
    assert message_work(raw) == ("farm.render", "j2", 3)


def test_foreign_or_broken_messages_are_ignored() -> None:
    assert queued_work([b"not json", json.dumps({"headers": {}}), "[]"]) == set()
