"""Webhook delivery: the control plane drains the ledger's outbox (Ledger.announce puts job
events in) and POSTs each notice, signed, to the job's `--notify` URL and the farm's
`notify_url`, retrying with backoff.

Runs as a thread beside the reconciler, so a slow receiver delays only other notices, never a
worker or a lease.
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from farm.core import notices
from farm.core.backoff import backoff_s
from farm.core.errors import FarmError
from farm.core.notices import Notice
from farm.ledger import Ledger

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    url: str
    status: int
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would resend the notice as a GET, to any host the
    answer names (the cloud's metadata address included). It is a failed delivery."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def post(url: str, data: bytes, headers: dict[str, str], timeout_s: float) -> Delivery:
    """One POST; any answer outside 2xx, or none, is a failed delivery (retried)."""
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with _OPENER.open(request, timeout=timeout_s) as answer:
            return Delivery(url=url, status=int(answer.status))
    except urllib.error.HTTPError as exc:
        return Delivery(url=url, status=exc.code, error=f"HTTP {exc.code}")
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        # HTTPException: something that is not an HTTP server answered (BadStatusLine).
        return Delivery(url=url, status=0, error=f"{type(exc).__name__}: {exc}")


@dataclass(slots=True, kw_only=True)
class Notifier:
    ledger: Ledger
    notify_url: str = ""
    """The farm-wide URL; each job may name its own (`farm submit --notify`)."""
    secret: str = ""
    timeout_s: float = 10.0

    def urls_for(self, job: dict[str, str]) -> list[str]:
        urls = [job.get("notify_url", ""), self.notify_url]
        return list(dict.fromkeys(u for u in urls if u))

    def deliver(self, notice: Notice, job: dict[str, str]) -> Delivery:
        data = notices.body(notices.payload(notice, job, self._spend(notice.job_id, job)))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "farm-webhooks/1",
            notices.EVENT_HEADER: notice.event,
            notices.DELIVERY_HEADER: notice.id,
        }
        if self.secret:
            headers[notices.SIGNATURE_HEADER] = notices.sign(data, self.secret)
        return post(notice.url, data, headers, self.timeout_s)

    def _spend(self, job_id: str, job: dict[str, str]) -> dict[str, Any] | None:
        try:
            return self.ledger.spend(job_id, job).to_json()
        except FarmError as exc:
            log.warning("job %s: cost unknown for the webhook: %s", job_id, exc)
            return None

    def drain_once(self) -> list[Delivery]:
        """Deliver every due notice once; returns what each delivery did."""
        results = []
        for member in self.ledger.claim_notices():
            notice = Notice.from_member(member)
            job = self.ledger.job(notice.job_id)
            if not notice.url:
                fanned = [
                    (notice.for_url(u, i), time.time()) for i, u in enumerate(self.urls_for(job))
                ]
                self.ledger.replace_notice(member, fanned)
                if fanned:
                    results.extend(self.drain_once())
                continue
            delivery = self.deliver(notice, job)
            results.append(delivery)
            if delivery.ok:
                self.ledger.replace_notice(member, [])
                self.ledger.event(notice.job_id, "webhook-sent", notice=notice.event)
                continue
            retry = notice.tried()
            if retry.tries >= notices.MAX_TRIES:
                log.error("webhook %s for %s gave up after %d tries: %s", notice.event,
                          notice.job_id, retry.tries, delivery.error)  # fmt: skip
                self.ledger.replace_notice(member, [])
                self.ledger.event(notice.job_id, "webhook-dropped", notice=notice.event,
                                  error=delivery.error)  # fmt: skip
                continue
            due = time.time() + backoff_s(retry.tries, cap_s=notices.REDELIVERY_CAP_S)
            log.warning("webhook %s for %s failed (%s); try %d in %.0f s", notice.event,
                        notice.job_id, delivery.error, retry.tries + 1, due - time.time())  # fmt: skip
            self.ledger.replace_notice(member, [(retry, due)])
        return results

    def run_forever(self, interval_s: float = 1.0) -> None:
        while True:
            try:
                self.drain_once()
            except FarmError as exc:
                log.warning("webhook outbox unreadable, will retry: %s", exc)
            except Exception:  # the thread must outlive any one notice: no other thread sends
                log.exception("webhook delivery failed; the notices stay in the outbox")
            time.sleep(interval_s)

    def start(self, interval_s: float = 1.0) -> threading.Thread:
        """A daemon thread draining the outbox (beside the reconciler's loop)."""
        thread = threading.Thread(
            target=self.run_forever, args=(interval_s,), daemon=True, name="webhooks"
        )
        thread.start()
        return thread


def subscribe(ledger: Ledger, job_id: str, url: str) -> None:
    """`farm submit --notify URL`: this job's events go to `url` too (read when each is sent)."""
    ledger.set_notify_url(job_id, url)
