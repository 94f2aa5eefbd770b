"""The webhook outbox in the ledger: put in by whoever moves a job, drained by farm.control.webhooks."""

from __future__ import annotations

import logging
import secrets
import time

from farm.core import keys, notices
from farm.core.errors import FarmError
from farm.ledger.base import LedgerBase, wrapped

log = logging.getLogger(__name__)


class Outbox(LedgerBase):
    """Notices of jobs' arrivals in the states people subscribe to, each sent once."""

    def announce(self, job_id: str, state: str) -> bool:
        """Put the job's arrival in `state` in the outbox, once per arrival (a job failed again
        after a retry is a new one: its `finished` or `paused` time differs). Never raises: a
        worker must not wait on, or fail because of, anyone's webhook. True when put in."""
        if str(state) not in notices.JOB_EVENTS:
            return False
        try:
            job = self.job(job_id)
            event = notices.event_for(str(state), job)
            if job.get("state") != str(state) or event is None:
                return False
            stamp = job.get(notices.STAMP_FIELDS.get(str(state), "finished")) or ""
            notice = notices.Notice(
                id=secrets.token_hex(8), job_id=job_id, event=event, t=time.time()
            )
            with wrapped("put a webhook notice in the outbox"):
                put = self.scripts.push_notice(
                    keys=[keys.r_notice_once(job_id, event, stamp), keys.r_outbox()],
                    args=[notice.to_member(), notice.t, notices.ONCE_TTL_S],
                )
            return bool(put)
        except FarmError as exc:
            log.warning("job %s: webhook notice not recorded: %s", job_id, exc)
            return False

    def claim_notices(self, *, hold_s: float = 120.0, limit: int = 20) -> list[str]:
        """Due notices (raw members), held for `hold_s` against other senders."""
        now = time.time()
        with wrapped("claim webhook notices"):
            members: list[str] = self.scripts.claim_notices(
                keys=[keys.r_outbox()], args=[now, now + hold_s, limit]
            )
        return members

    def replace_notice(self, member: str, later: list[tuple[notices.Notice, float]]) -> None:
        """Swap a claimed notice for others (its fan-out, or its next try), each due then."""
        with wrapped("update the webhook outbox"):
            pipe = self.r.pipeline(transaction=True)
            pipe.zrem(keys.r_outbox(), member)
            for notice, due in later:
                pipe.zadd(keys.r_outbox(), {notice.to_member(): due})
            pipe.execute()

    def pending_notices(self) -> list[tuple[notices.Notice, float]]:
        with wrapped("read the webhook outbox"):
            raw = self.r.zrange(keys.r_outbox(), 0, -1, withscores=True)
        return [(notices.Notice.from_member(m), float(score)) for m, score in raw]

    def set_notify_url(self, job_id: str, url: str) -> None:
        """`farm submit --notify URL`: the job's events go there too (read when each is sent)."""
        with wrapped("record the job's webhook"):
            self.r.hset(keys.r_job(job_id), "notify_url", url)
