"""Retry backoff, one formula for the farm: exponential steps from `base_s`, capped, with "equal
jitter". A chunk's retry and its stitch's (workers.attempt.policy) and a webhook's redelivery
(farm.control.webhooks) each pass their own numbers."""

from __future__ import annotations


def backoff_s(tries: int, *, base_s: float = 2.0, cap_s: float, jitter: float = 1.0) -> float:
    """Seconds to wait after `tries` failures: base_s, 2 base_s, 4 base_s, ... at most cap_s.
    `jitter`, a uniform draw in [0, 1), takes between half and all of that step ("equal
    jitter"), so chunks that failed together (a store outage) do not all come back in the same
    second; 1, the default, is the whole step. Pure: the caller draws the jitter.

    Celery's get_exponential_backoff_interval draws "full jitter" (anywhere from 0) itself, and
    the core may not import Celery; hence this one."""
    step = min(cap_s, base_s * 2 ** max(tries - 1, 0))
    return float(step / 2 + step / 2 * jitter)
