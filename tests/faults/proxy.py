"""A fault proxy of the tests' own: a thread-based TCP proxy on a free loopback port, forwarding to
a target, told while it runs which faults to inject. HttpFaultProxy stands before the store (S3
errors such as 503 SlowDown, requests held past the client's timeout, bodies sent slowly,
connections reset mid-response); TcpFaultProxy before Redis (every connection cut and new ones
refused for a while, or each read delayed). Both count what they injected, by kind.
"""

from __future__ import annotations

import random
import re
import socket
import time
from contextlib import suppress
from dataclasses import dataclass, field

from tests.faults.listener import HOST, Listener
from tests.faults.tcp import TcpFaultProxy
from tests.faults.wire import Head, Wire, request_body, reset, response_body, s3_error

__all__ = ["HttpFaultProxy", "Rule", "Seen", "TcpFaultProxy"]


@dataclass(slots=True, kw_only=True)
class Rule:
    """One fault for the requests that match it: `left` more of them (None: every one), each
    with chance `fraction`."""

    kind: str
    """error, hold, slow or reset."""
    left: int | None = None
    fraction: float = 1.0
    method: str = ""
    path: re.Pattern[str] | None = None
    status: int = 503
    code: str = "SlowDown"
    message: str = "Please reduce your request rate."
    hold_s: float = 300.0
    forward: bool = True
    bytes_per_s: int = 4096
    after_bytes: int = 64

    @property
    def label(self) -> str:
        return f"{self.status} {self.code}" if self.kind == "error" else self.kind

    def matches(self, head: Head) -> bool:
        return (not self.method or head.method == self.method.upper()) and (
            self.path is None or self.path.search(head.path) is not None
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Seen:
    """A request as the proxy saw it, and the fault it met ('' for none)."""

    at: float
    """time.monotonic() as its head arrived."""
    method: str
    path: str
    fault: str
    invocation: str = ""
    """botocore's amz-sdk-invocation-id: the same on every attempt of one call."""
    attempt: int = 0
    """botocore's attempt number of that call (amz-sdk-request), from 1."""


def _attempt(head: Head) -> int:
    found = re.search(r"attempt=(\d+)", head.get("amz-sdk-request"))
    return int(found[1]) if found else 0


@dataclass(slots=True)
class _Plan:
    rules: list[Rule] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)


class HttpFaultProxy(Listener):
    """Before an S3 endpoint: each request is read whole (an `Expect: 100-continue` answered
    here), sent on, and its answer relayed, unless a rule gives it a fault. Rules are kept in
    the order given; a request meets the first one that matches and is drawn."""

    def __init__(self, target: tuple[str, int], *, seed: int = 0) -> None:
        super().__init__(target)
        self._plan = _Plan()
        self._rng = random.Random(seed)
        self._ids = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def error(
        self,
        status: int = 503,
        code: str = "SlowDown",
        message: str = "Please reduce your request rate.",
        *,
        count: int | None = None,
        fraction: float = 1.0,
        method: str = "",
        path: str = "",
    ) -> None:
        """Answer matching requests with an S3 error (the default: 503 SlowDown) instead of
        sending them on: the next `count` (None: all), or `fraction` of them."""
        self._add(Rule(kind="error", status=status, code=code, message=message, left=count,
                       fraction=fraction, method=method, path=re.compile(path) if path else None))  # fmt: skip

    def hold(
        self,
        *,
        count: int | None = 1,
        fraction: float = 1.0,
        hold_s: float = 300.0,
        forward: bool = True,
        method: str = "",
        path: str = "",
    ) -> None:
        """Never answer matching requests: hold each until its client gives up and closes (its
        read timeout), or `hold_s`. `forward`: the store still gets it and acts on it; only
        its answer is lost."""
        self._add(Rule(kind="hold", left=count, fraction=fraction, hold_s=hold_s,
                       forward=forward, method=method, path=re.compile(path) if path else None))  # fmt: skip

    def slow(
        self,
        *,
        count: int | None = None,
        fraction: float = 1.0,
        bytes_per_s: int = 4096,
        method: str = "",
        path: str = "",
    ) -> None:
        """Send matching requests' answers slowly: the head at once, the body `bytes_per_s`."""
        self._add(Rule(kind="slow", left=count, fraction=fraction, bytes_per_s=bytes_per_s,
                       method=method, path=re.compile(path) if path else None))  # fmt: skip

    def reset(
        self,
        *,
        count: int | None = 1,
        fraction: float = 1.0,
        after_bytes: int = 64,
        method: str = "",
        path: str = "",
    ) -> None:
        """Reset the connection (RST) after the first `after_bytes` bytes of matching requests'
        answers (never the whole answer); the store got and did the request."""
        self._add(Rule(kind="reset", left=count, fraction=fraction, after_bytes=after_bytes,
                       method=method, path=re.compile(path) if path else None))  # fmt: skip

    def clear(self) -> None:
        """No more faults: every request from now on is sent on as it came."""
        with self._lock:
            self._plan.rules.clear()

    def forget(self) -> None:
        """Count from nothing again, and forget the requests seen."""
        with self._lock:
            self._injected.clear()
            self._plan.seen.clear()

    def seen(self) -> list[Seen]:
        """Every request so far, in the order their heads arrived."""
        with self._lock:
            return list(self._plan.seen)

    def _add(self, rule: Rule) -> None:
        if rule.left is not None and rule.left < 1:
            raise ValueError(f"count must be 1 or more (None: every request), not {rule.left}")
        if not 0 < rule.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], not {rule.fraction}")
        with self._lock:
            self._plan.rules.append(rule)

    def _take(self, head: Head) -> Rule | None:
        """The rule this request meets, if any, spent once; the request recorded."""
        with self._lock:
            met = None
            for rule in self._plan.rules:
                if rule.matches(head) and (
                    rule.fraction >= 1 or self._rng.random() < rule.fraction
                ):
                    met = rule
                    break
            if met is not None and met.left is not None:
                met.left -= 1
                if met.left == 0:
                    self._plan.rules.remove(met)
            self._plan.seen.append(Seen(
                at=time.monotonic(), method=head.method, path=head.path,
                fault=met.label if met else "", invocation=head.get("amz-sdk-invocation-id"),
                attempt=_attempt(head),
            ))  # fmt: skip
            if met is not None:
                self._injected[met.label] += 1
                self._ids += 1
            return met

    def _serve(self, client: socket.socket) -> None:
        wire, upstream = Wire(client), None
        try:
            while (raw := wire.head()) is not None:
                head = Head.parse(raw)
                rule = self._take(head)
                expects = head.get("expect").lower() == "100-continue"
                if rule is not None and rule.kind == "error":
                    if not self._answer_error(client, wire, head, rule, expects):
                        return
                    continue
                if expects:  # said here, so the store never sees the Expect (botocore signs none)
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = request_body(wire, head)
                if rule is not None and rule.kind == "hold" and not rule.forward:
                    self._hold(client, rule)
                    return
                if upstream is None:
                    upstream = Wire(self._connect())
                    with self._lock:
                        self._open.add(upstream.sock)
                upstream.sock.sendall(head.without("expect").encode() + body)
                answer_raw = upstream.head()
                if answer_raw is None:
                    return  # the store closed: so does the proxy
                answer = Head.parse(answer_raw)
                answer_body, to_close = response_body(upstream, answer, head.method)
                if rule is not None and not self._faulty_answer(
                    client, rule, answer_raw, answer_body
                ):
                    return
                if rule is None:
                    client.sendall(answer_raw + answer_body)
                if to_close or answer.closes or head.closes:
                    return
        finally:
            if upstream is not None:
                with self._lock:
                    self._open.discard(upstream.sock)
                upstream.sock.close()

    def _answer_error(
        self, client: socket.socket, wire: Wire, head: Head, rule: Rule, expects: bool
    ) -> bool:
        """Answer with the rule's S3 error; True where the connection goes on. A client that
        waits to send its body (Expect) never sends it: the connection closes after the answer."""
        with self._lock:
            request_id = f"FAULT{self._ids:08d}"
        if not expects:
            request_body(wire, head)
        client.sendall(s3_error(rule.status, rule.code, rule.message, request_id,
                                head_only=head.method == "HEAD", close=expects))  # fmt: skip
        if expects:
            _drain(client)
            return False
        return True

    def _faulty_answer(self, client: socket.socket, rule: Rule, head: bytes, body: bytes) -> bool:
        """Relay the store's answer as the rule says; True where the connection goes on."""
        if rule.kind == "hold":
            self._hold(client, rule)
            return False
        if rule.kind == "reset":
            whole = head + body
            client.sendall(whole[: max(1, min(rule.after_bytes, len(whole) - 1))])
            reset(client)
            return False
        client.sendall(head)  # slow
        piece = max(1, rule.bytes_per_s // 10)
        for at in range(0, len(body), piece):
            if self._stop.wait(piece / rule.bytes_per_s):
                return False
            client.sendall(body[at : at + piece])
        return True

    def _hold(self, client: socket.socket, rule: Rule) -> None:
        """Until the client closes (its read timeout), the proxy closes, or `hold_s`."""
        deadline = time.monotonic() + rule.hold_s
        client.settimeout(0.2)
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                if not client.recv(65536):
                    return
            except TimeoutError:
                continue
            except OSError:
                return


def _drain(client: socket.socket, limit_s: float = 5.0) -> None:
    """Half-close, then read what the client still sends until it closes: a close with unread
    bytes would be an RST, and the client might lose the answer it was sent."""
    with suppress(OSError):
        client.shutdown(socket.SHUT_WR)
    client.settimeout(limit_s)
    with suppress(OSError):
        while client.recv(65536):
            pass
