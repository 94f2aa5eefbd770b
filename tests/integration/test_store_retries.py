"""No retry storm against a failing store: the farm's Store (botocore's standard retry mode) backs
off with jitter, tries each call at most 6 times (botocore's `max_attempts` 5 counts the retries),
and once its retry quota is spent stops retrying at all, however many threads share it, until
calls succeed again.

Counted by a fault proxy between the Store and a real SeaweedFS, never timed. botocore's standard
mode (botocore/retries/standard.py, quota.py) as these tests pin it: one RetryQuota of 500 per
client, shared by every thread using the client under a lock; a throttling retry (SlowDown) takes
5 of it, any other (a bare 503, a 500, a timeout, a reset) 14; a call that succeeds gives back what
its retry took, or 1 when it took none. A failed call gives nothing back. Each retry waits
rand(0, 1) * min(scale * 2 ** (attempt - 1), 20) s, scale 1 s for throttling, 50 ms otherwise.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from botocore.retries.quota import RetryQuota
from botocore.retries.standard import RetryQuotaChecker

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.core.errors import StoreError, StoreRefused
from tests.faults.proxy import HttpFaultProxy, Seen

QUOTA = RetryQuota.INITIAL_CAPACITY
THROTTLED_COST = RetryQuotaChecker._THROTTLING_RETRY_COST  # type: ignore[attr-defined]
OTHER_COST = RetryQuotaChecker._RETRY_COST  # type: ignore[attr-defined]


@pytest.fixture
def proxy(store: Store) -> Iterator[HttpFaultProxy]:
    endpoint = urlsplit(store.s3.meta.endpoint_url)
    with HttpFaultProxy((endpoint.hostname or "127.0.0.1", endpoint.port or 80)) as found:
        yield found


def _through(proxy: HttpFaultProxy, store: Store) -> Store:
    """A new Store as the farm makes one (Store.from_settings: its own client, its own retry
    quota), reaching `store`'s bucket through the proxy."""
    return Store.from_settings(Settings(
        s3_endpoint=proxy.url, s3_bucket=store.bucket, s3_access_key="test-key",
        s3_secret_key="test-secret",
    ))  # fmt: skip


def _tries(store: Store) -> int:
    """The most requests one call makes: botocore's `max_attempts` (farm.adapters.store gives 5)
    counts the retries, so a call is tried once more than that (`total_max_attempts`)."""
    tries: int = store.s3.meta.config.retries["total_max_attempts"]
    return tries


def _hammer(store: Store, threads: int, calls: int) -> list[Exception]:
    """`threads` threads sharing `store`, each making `calls` small PUTs; what each call raised."""
    raised: list[Exception] = []
    lock = threading.Lock()

    def work(worker: int) -> None:
        for call in range(calls):
            try:
                store.put_bytes(f"storm/{worker}/{call}", b"frame")
            except Exception as exc:
                with lock:
                    raised.append(exc)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return raised


def _peak_per_s(seen: list[Seen]) -> int:
    """The most requests that arrived within one second (printed, never asserted: a wall-clock
    rate depends on the machine)."""
    times = sorted(s.at for s in seen)
    return max((sum(1 for t in times if start <= t < start + 1) for start in times), default=0)


def test_a_store_answering_503_slowdown_to_everything_gets_at_most_the_retry_quota_of_retries(
    store: Store, proxy: HttpFaultProxy
) -> None:
    """GIVEN a store that answers 503 SlowDown to every request WHEN 20 threads sharing one
    Store make 4 PUTs each THEN every call fails as a transient StoreError naming SlowDown, no
    call is tried more than total_max_attempts (6) times, and all threads together retry exactly
    as often as the retry quota allows (500 / 5 = 100), not 5 times a call (500)."""
    proxied = _through(proxy, store)
    proxy.error(503, "SlowDown")
    threads, calls = 25, 4
    raised = _hammer(proxied, threads, calls)

    assert len(raised) == threads * calls
    assert all(isinstance(e, StoreError) and not isinstance(e, StoreRefused) for e in raised)
    assert all("SlowDown" in str(e) for e in raised)
    seen = proxy.seen()
    tries = Counter(s.invocation for s in seen)
    assert len(tries) == threads * calls and max(tries.values()) <= _tries(proxied)
    retries = len(seen) - threads * calls
    unchecked = threads * calls * (_tries(proxied) - 1)
    assert retries == QUOTA // THROTTLED_COST < unchecked
    assert proxy.injected() == {"503 SlowDown": len(seen)}
    print(f"{len(seen)} requests for {threads * calls} calls ({retries} retries of {unchecked} "
          f"unchecked), at most {_peak_per_s(seen)} in one second; attempts: "
          f"{sorted(Counter(s.attempt for s in seen).items())}")  # fmt: skip


def test_other_server_errors_spend_the_quota_faster_and_the_store_comes_back_without_a_storm(
    store: Store, proxy: HttpFaultProxy
) -> None:
    """GIVEN a store that answers a bare 503 (not a throttle) to everything WHEN 10 threads
    sharing one Store make 10 PUTs each THEN the retries stop at 500 / 14 = 35; AND once the
    store answers again every call succeeds at its first try, and is stored."""
    proxied = _through(proxy, store)
    proxy.error(503, "ServiceUnavailable", "Service is unable to handle request.")
    raised = _hammer(proxied, 10, 10)
    assert len(raised) == 100 and all(type(e) is StoreError for e in raised)
    assert len(proxy.seen()) - 100 == QUOTA // OTHER_COST

    proxy.clear()
    before = len(proxy.seen())
    assert _hammer(proxied, 10, 2) == []
    assert len(proxy.seen()) - before == 20  # no call needed a retry
    assert store.get_bytes("storm/9/1") == b"frame"


def test_a_refusal_fails_at_its_first_answer_without_a_retry(
    store: Store, proxy: HttpFaultProxy
) -> None:
    """GIVEN a store that refuses every PUT (403 AccessDenied) WHEN PUTs are made THEN each
    fails at once as StoreRefused (permanent: the chunk fails rather than retries), one request
    each."""
    proxied = _through(proxy, store)
    proxy.error(403, "AccessDenied", "Access Denied", method="PUT")
    raised = _hammer(proxied, 4, 3)
    assert len(raised) == 12 and all(isinstance(e, StoreRefused) for e in raised)
    assert "AccessDenied" in str(raised[0]) and "credentials may not" in str(raised[0])
    assert len(proxy.seen()) == 12 and proxy.injected() == {"403 AccessDenied": 12}
