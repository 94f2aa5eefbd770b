"""Webhook delivery: the control plane drains the ledger's outbox (Ledger.announce puts job
events in) and POSTs each notice, signed, to the job's `--notify` URL and the farm's
`notify_url`, retrying with backoff.

A webhook is a request the farm makes where a user points it, so it is aimed only at public
addresses: the host is resolved once, every address checked (loopback, private, link-local, cloud
metadata ... refused unless `webhook_allow` names their range) and the connection made to the
address checked, never to a second lookup (DNS rebinding). Each delivery has one deadline for
connect, send and answer together, and deliveries run on a few threads beside the reconciler, so
a slow receiver holds only its own notice, never another's, a worker or a lease.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import Any
from urllib.parse import urlsplit

from farm.core import notices
from farm.core.backoff import backoff_s
from farm.core.errors import ConfigError, FarmError, SpecError, UnreachableError
from farm.core.notices import Notice
from farm.ledger import Ledger

log = logging.getLogger(__name__)
IP = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

DEADLINE_S = 10.0
"""A delivery's whole time: connect, TLS, send and the answer's status line and headers."""
SENDERS = 6
"""Deliveries under way at once: a slow or silent receiver holds one of them, for DEADLINE_S."""
METADATA = frozenset(
    ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)
"""Cloud instance metadata services (AWS and its ECS tasks, AWS on IPv6, Alibaba, Oracle): each
hands out the host's credentials to whoever asks from it."""
_CGNAT = ip_network("100.64.0.0/10")
_NAT64 = ip_network("64:ff9b::/96")


class TargetRefused(SpecError):
    """A webhook URL whose host is, or resolves to, an address webhooks may not reach: refused
    at submit (exit 2) and dropped at delivery, never retried."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A webhook URL, resolved once and checked: what a delivery connects to."""

    url: str
    host: str
    port: int
    tls: bool
    path: str
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    url: str
    status: int
    error: str = ""
    refused: bool = False
    """The URL's address is refused: the notice can never be delivered, so it is dropped."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def refusal(ip: IP) -> str | None:
    """Why webhooks may not reach `ip` (None: a public address). An IPv6 address that carries an
    IPv4 one (mapped, 6to4, NAT64) is judged by the IPv4 address it reaches."""
    if ip in METADATA:
        return "a cloud metadata address"
    if isinstance(ip, IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return refusal(embedded)
    kinds = (
        (ip.is_loopback, "loopback"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (isinstance(ip, IPv4Address) and ip in _CGNAT, "carrier-grade NAT"),
        (ip.is_private, "private"),
        (not ip.is_global, "reserved"),
    )
    return next((why for refused, why in kinds if refused), None)


def allowed_ranges(text: str) -> tuple[Network, ...]:
    """The `webhook_allow` setting: comma-separated CIDR ranges webhooks may reach even though
    they are not public (a receiver on the farm's own network, or a local farm's tests)."""
    ranges = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            ranges.append(ip_network(part, strict=False))
        except ValueError as exc:
            raise ConfigError(
                f"FARM_WEBHOOK_ALLOW: {part!r} is not an address range ({exc}); write CIDR "
                "ranges separated by commas, e.g. 10.0.5.0/24,127.0.0.1/32"
            ) from exc
    return tuple(ranges)


def resolve(url: str, allow: Iterable[Network] = ()) -> Target:
    """Resolve `url`'s host and check every address it has; TargetRefused names the first one
    refused, why, and the setting that would allow it. UnreachableError: no address found."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused(f"{url} has no valid port ({exc})") from exc
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise TargetRefused(f"{url} is not an http:// or https:// URL with a host")
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:  # perhaps for a while: tried again later
        raise UnreachableError(f"{host} cannot be resolved ({exc})") from exc
    addresses = tuple(dict.fromkeys(str(info[4][0]) for info in found))
    allow = tuple(allow)
    for address in addresses:
        ip = ip_address(address.partition("%")[0])
        why = refusal(ip)
        if why and not any(ip in network for network in allow):
            named = f"{host} is" if _is_literal(host) else f"{host} resolves to {ip},"
            raise TargetRefused(
                f"{named} {why}: webhooks go only to public addresses; to send there anyway, "
                f"add its range to FARM_WEBHOOK_ALLOW (e.g. {ip}/{ip.max_prefixlen})"
            )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(url=url, host=host, port=port, tls=parts.scheme == "https", path=path,
                  addresses=addresses)  # fmt: skip


def _is_literal(host: str) -> bool:
    """Whether a URL's host is an address itself (then the refusal need not say it twice)."""
    try:
        ip_address(host)
    except ValueError:
        return False
    return True


class _Pinned(http.client.HTTPConnection):
    """An HTTP(S) connection to the addresses checked: the name is never looked up again, yet the
    Host header, TLS's SNI and the certificate check all keep it. `cut()` (the deadline, from
    another thread) shuts the socket, so a receiver that answers a byte at a time cannot hold it.
    """

    def __init__(self, target: Target, deadline_s: float, tls: ssl.SSLContext) -> None:
        super().__init__(target.host, target.port, timeout=deadline_s)
        self._target, self._tls = target, tls
        self.was_cut = False

    def connect(self) -> None:
        sock = self._connect_any()
        if self._target.tls:
            sock = self._tls.wrap_socket(
                sock, server_hostname=self.host, do_handshake_on_connect=False
            )
        self.sock = sock
        if self.was_cut:  # the deadline passed while connecting: cut() found no socket to shut
            raise TimeoutError("the deadline passed while connecting")
        if isinstance(sock, ssl.SSLSocket):
            sock.do_handshake()

    def _connect_any(self) -> socket.socket:
        """A connection to the first of the target's addresses that takes one in time."""
        error: OSError = OSError("no address to connect to")
        for address in self._target.addresses:
            if self.was_cut:
                raise TimeoutError("the deadline passed while connecting")
            try:
                return socket.create_connection((address, self.port), timeout=self.timeout)
            except OSError as exc:
                error = exc
        raise error

    def cut(self) -> None:
        self.was_cut = True
        if self.sock is not None:
            # The plain socket's shutdown: SSLSocket's would unwrap it under the reader.
            with contextlib.suppress(OSError):  # closed already
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)


def post(
    target: Target, data: bytes, headers: dict[str, str], deadline_s: float, tls: ssl.SSLContext
) -> Delivery:
    """One POST, done or cut within `deadline_s`; any answer outside 2xx, or none, is a failed
    delivery (retried). A redirect is not followed: it is a failed delivery too."""
    conn = _Pinned(target, deadline_s, tls)
    watchdog = threading.Timer(deadline_s, conn.cut)
    watchdog.start()
    try:
        conn.request("POST", target.path, body=data, headers=headers)
        status = conn.getresponse().status  # the body is never read
        ok = 200 <= status < 300
        return Delivery(url=target.url, status=status, error="" if ok else f"HTTP {status}")
    except (http.client.HTTPException, OSError, ValueError) as exc:
        # HTTPException: something that is not an HTTP server answered (BadStatusLine).
        if conn.was_cut:
            return Delivery(url=target.url, status=0, error=f"no answer in {deadline_s:g} s")
        return Delivery(url=target.url, status=0, error=f"{type(exc).__name__}: {exc}")
    finally:
        watchdog.cancel()
        conn.close()


@dataclass(slots=True, kw_only=True)
class Notifier:
    ledger: Ledger
    notify_url: str = ""
    """The farm-wide URL; each job may name its own (`farm submit --notify`)."""
    secret: str = ""
    allow: tuple[Network, ...] = ()
    """Ranges webhooks may reach though not public (allowed_ranges of `webhook_allow`)."""
    deadline_s: float = DEADLINE_S
    senders: int = SENDERS
    _pool: ThreadPoolExecutor = field(init=False)
    _under_way: set[Future[Delivery | None]] = field(init=False, default_factory=set)
    _tls: ssl.SSLContext = field(init=False, default_factory=ssl.create_default_context)

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.senders, thread_name_prefix="webhooks")

    def urls_for(self, job: dict[str, str]) -> list[str]:
        urls = [job.get("notify_url", ""), self.notify_url]
        return list(dict.fromkeys(u for u in urls if u))

    def deliver(self, notice: Notice, job: dict[str, str]) -> Delivery:
        try:
            target = resolve(notice.url, self.allow)
        except TargetRefused as exc:
            return Delivery(url=notice.url, status=0, error=str(exc), refused=True)
        except UnreachableError as exc:
            return Delivery(url=notice.url, status=0, error=str(exc))
        data = notices.body(notices.payload(notice, job, self._spend(notice.job_id, job)))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "farm-webhooks/1",
            notices.EVENT_HEADER: notice.event,
            notices.DELIVERY_HEADER: notice.id,
        }
        if self.secret:
            headers[notices.SIGNATURE_HEADER] = notices.sign(data, self.secret)
        return post(target, data, headers, self.deadline_s, self._tls)

    def _spend(self, job_id: str, job: dict[str, str]) -> dict[str, Any] | None:
        try:
            return self.ledger.spend(job_id, job).to_json()
        except FarmError as exc:
            log.warning("job %s: cost unknown for the webhook: %s", job_id, exc)
            return None

    def send(self, member: str) -> Delivery | None:
        """Deliver one claimed notice and record what came of it: sent, tried again later, or
        dropped. A notice not yet fanned out is replaced by one per URL (None: nothing sent)."""
        notice = Notice.from_member(member)
        job = self.ledger.job(notice.job_id)
        if not notice.url:
            fanned = [(notice.for_url(u, i), time.time()) for i, u in enumerate(self.urls_for(job))]
            self.ledger.replace_notice(member, fanned)
            return None
        delivery = self.deliver(notice, job)
        if delivery.ok:
            self.ledger.replace_notice(member, [])
            self.ledger.event(notice.job_id, "webhook-sent", notice=notice.event)
            return delivery
        retry = notice.tried()
        if delivery.refused or retry.tries >= notices.MAX_TRIES:
            why = "refused" if delivery.refused else f"gave up after {retry.tries} tries"
            log.error("webhook %s for %s %s: %s", notice.event, notice.job_id, why, delivery.error)
            self.ledger.replace_notice(member, [])
            self.ledger.event(notice.job_id, "webhook-dropped", notice=notice.event,
                              error=delivery.error)  # fmt: skip
            return delivery
        due = time.time() + backoff_s(retry.tries, cap_s=notices.REDELIVERY_CAP_S)
        log.warning("webhook %s for %s failed (%s); try %d in %.0f s", notice.event,
                    notice.job_id, delivery.error, retry.tries + 1, due - time.time())  # fmt: skip
        self.ledger.replace_notice(member, [(retry, due)])
        return delivery

    def drain_once(self) -> list[Delivery]:
        """Deliver every due notice once, on the senders, and wait for them all (fanned-out
        notices included); returns what each delivery did."""
        results: list[Delivery] = []
        fanned = True
        while fanned:
            sent = list(self._pool.map(self.send, self.ledger.claim_notices()))
            fanned = None in sent
            results += [d for d in sent if d is not None]
        return results

    def pump(self) -> int:
        """Start the due notices that the free senders can take, without waiting for any:
        returns how many were started."""
        self._under_way = {f for f in self._under_way if not f.done()}
        free = self.senders - len(self._under_way)
        members = self.ledger.claim_notices(limit=free) if free > 0 else []
        self._under_way |= {self._pool.submit(self._send_logged, m) for m in members}
        return len(members)

    def _send_logged(self, member: str) -> Delivery | None:
        try:
            return self.send(member)
        except FarmError as exc:
            log.warning("webhook notice left in the outbox, will retry: %s", exc)
        except Exception:  # a sender must outlive any one notice
            log.exception("webhook delivery failed; the notice stays in the outbox")
        return None

    def run_forever(self, interval_s: float = 1.0) -> None:
        while True:
            try:
                self.pump()
            except FarmError as exc:
                log.warning("webhook outbox unreadable, will retry: %s", exc)
            except Exception:  # the thread must outlive any one pass: no other thread sends
                log.exception("webhook delivery failed; the notices stay in the outbox")
            time.sleep(interval_s)

    def start(self, interval_s: float = 1.0) -> threading.Thread:
        """A daemon thread handing the outbox's due notices to the senders (beside the
        reconciler's loop)."""
        thread = threading.Thread(
            target=self.run_forever, args=(interval_s,), daemon=True, name="webhooks"
        )
        thread.start()
        return thread


def subscribe(ledger: Ledger, job_id: str, url: str) -> None:
    """`farm submit --notify URL`: this job's events go to `url` too (read when each is sent)."""
    ledger.set_notify_url(job_id, url)
