"""Webhook notices (pure): which job events are announced, the JSON body, its signature, the
retry schedule (the outbox in Redis is farm.ledger.outbox's).

A receiver checks `X-Farm-Signature: sha256=<hex>`, the HMAC-SHA256 of the raw body with the
farm's webhook secret, and drops repeats by `X-Farm-Delivery` (delivery is at least once).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from farm.core.state import JobState

JOB_EVENTS: dict[str, str] = {
    JobState.DONE: "job.done",
    JobState.FAILED: "job.failed",
    JobState.CANCELLED: "job.cancelled",
    JobState.PAUSED: "job.paused",
    JobState.HELD: "job.held",
}
"""Job states whose arrival is announced, and the event's name. A new state to announce is one
entry here."""
BUDGET_EVENT = "job.budget"
"""A pause the budget made (its reason starts with `budget:`), told apart from a user's pause."""
STAMP_FIELDS: dict[str, str] = {JobState.PAUSED: "paused", JobState.HELD: "held"}
"""The job field that dates each arrival (default `finished`): one notice per arrival."""


def event_for(state: str, job: dict[str, str]) -> str | None:
    """The event a job's arrival in `state` announces, if any."""
    event = JOB_EVENTS.get(state)
    if event == JOB_EVENTS[JobState.PAUSED] and job.get("paused_reason", "").startswith("budget"):
        return BUDGET_EVENT
    return event


SIGNATURE_HEADER = "X-Farm-Signature"
EVENT_HEADER = "X-Farm-Event"
DELIVERY_HEADER = "X-Farm-Delivery"
ONCE_TTL_S = 30 * 24 * 3600
"""How long an announced arrival is remembered (so it is put in the outbox once)."""
MAX_TRIES = 10
"""Deliveries tried per notice and URL (about 40 minutes of backoff) before it is dropped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    id: str
    job_id: str
    event: str
    t: float
    url: str = ""
    """Empty until the notice is fanned out to the job's and the farm's URLs."""
    tries: int = 0

    def to_member(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_member(cls, member: str) -> Notice:
        return cls(**json.loads(member))

    def for_url(self, url: str, index: int) -> Notice:
        return replace(self, id=f"{self.id}-{index}", url=url)

    def tried(self) -> Notice:
        return replace(self, tries=self.tries + 1)


REDELIVERY_CAP_S = 600.0
"""A delivery that failed `tries` times is tried again after farm.core.backoff.backoff_s(tries,
cap_s=REDELIVERY_CAP_S): 2, 4, 8, ... s, capped at ten minutes, no jitter."""


def payload(
    notice: Notice, job: dict[str, str], spend: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON body; `spend`: the job's cost so far (farm.core.cost.Spend.to_json), when known."""
    spec = json.loads(job.get("spec") or "{}")
    return {
        "id": notice.id,
        "event": notice.event,
        "time": notice.t,
        "job": {
            "id": notice.job_id,
            "kind": job.get("kind", ""),
            "state": job.get("state", ""),
            "source_name": spec.get("source_name", ""),
            "chunks_total": int(job.get("chunks_total") or 0),
            "chunks_done": int(job.get("chunks_done") or 0),
            "frames_total": int(job.get("frames_total") or 0),
            "output": job.get("output", ""),
            "error": job.get("error", ""),
            "paused_reason": job.get("paused_reason", ""),
            "spend": spend,
        },
    }


def body(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def sign(data: bytes, secret: str) -> str:
    """The signature header's value for this body."""
    return "sha256=" + hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()


def verify(data: bytes, secret: str, header: str) -> bool:
    """What a receiver does (and the tests): compare in constant time."""
    return hmac.compare_digest(sign(data, secret), header)
