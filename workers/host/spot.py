"""Watching the instance metadata service (IMDSv2) for spot interruption and rebalance notices.

A notice becomes a typed value (as Deadline's worker agent does): the worker stops taking chunks,
and for an interruption judges whether the chunk in hand can finish before the deadline.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

log = logging.getLogger(__name__)

TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"


@dataclass(frozen=True, slots=True, kw_only=True)
class Interruption:
    """The instance will be stopped or terminated at `deadline` (unix seconds)."""

    action: str
    deadline: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Rebalance:
    """EC2 recommends moving work off this instance: take nothing new."""

    notice_time: float


def parse_instance_action(body: str) -> Interruption:
    """`{"action": "terminate", "time": "2026-12-02T10:15:00Z"}` -> Interruption."""
    data = json.loads(body)
    when = datetime.fromisoformat(data["time"].replace("Z", "+00:00")).timestamp()
    return Interruption(action=data.get("action", "terminate"), deadline=when)


def parse_rebalance(body: str) -> Rebalance:
    data = json.loads(body)
    when = datetime.fromisoformat(data["noticeTime"].replace("Z", "+00:00")).timestamp()
    return Rebalance(notice_time=when)


def can_finish(
    *,
    remaining_frames: int,
    frame_time_s: float,
    deadline: float,
    now: float,
    margin_s: float = 20.0,
) -> bool:
    """Keep rendering only if the remaining frames (plus upload and hand-over margin) fit."""
    if remaining_frames <= 0:
        return True
    if frame_time_s <= 0:
        return False
    return now + remaining_frames * frame_time_s + margin_s < deadline


IDENTITY_PATHS = {
    "instance_type": "/latest/meta-data/instance-type",
    "lifecycle": "/latest/meta-data/instance-life-cycle",
    "region": "/latest/meta-data/placement/region",
}
"""What a worker reads once at start to price its attempts (IMDSv2; lifecycle is `spot` or
`on-demand`)."""


def read_identity(base_url: str, timeout_s: float = 1.0) -> dict[str, str] | None:
    """instance_type, lifecycle and region from IMDSv2, or None off EC2 (nothing answers)."""
    base = base_url.rstrip("/")
    if not base:
        return None

    def call(path: str, method: str = "GET", headers: dict[str, str] | None = None) -> str:
        request = urllib.request.Request(base + path, method=method, headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: bytes = response.read()
            return body.decode().strip()

    try:
        token = call(TOKEN_PATH, "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        found = {}
        for name, path in IDENTITY_PATHS.items():
            try:
                found[name] = call(path, headers={"X-aws-ec2-metadata-token": token})
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
        if "instance_type" not in found:
            return None
        return found
    except (OSError, ValueError) as exc:
        log.info("no instance metadata at %s (%s): pricing as a local machine", base, exc)
        return None


class SpotWatcher:
    """Polls IMDSv2 every `interval_s`; calls each handler once when its notice first appears."""

    def __init__(
        self,
        base_url: str,
        *,
        on_interruption: Callable[[Interruption], None],
        on_rebalance: Callable[[Rebalance], None],
        interval_s: float = 2.0,
        timeout_s: float = 1.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.on_interruption = on_interruption
        self.on_rebalance = on_rebalance
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._token = ""
        self._token_expiry = 0.0
        self._seen_interruption = False
        self._seen_rebalance = False
        self._stop = threading.Event()

    def _request(
        self, path: str, method: str = "GET", headers: dict[str, str] | None = None
    ) -> str | None:
        request = urllib.request.Request(self.base_url + path, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body: bytes = response.read()
                return body.decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def _get(self, path: str) -> str | None:
        if time.time() > self._token_expiry - 30:
            token = self._request(
                TOKEN_PATH, "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
            )
            self._token = token or ""
            self._token_expiry = time.time() + 21600
        return self._request(path, headers={"X-aws-ec2-metadata-token": self._token})

    def poll_once(self) -> None:
        if not self._seen_interruption:
            body = self._get(ACTION_PATH)
            if body:
                self._seen_interruption = True
                notice = parse_instance_action(body)
                log.warning(
                    "spot %s notice: deadline in %.0f s",
                    notice.action,
                    notice.deadline - time.time(),
                )
                self.on_interruption(notice)
        if not self._seen_rebalance and not self._seen_interruption:
            body = self._get(REBALANCE_PATH)
            if body:
                self._seen_rebalance = True
                log.warning("rebalance recommendation: taking no new chunks")
                self.on_rebalance(parse_rebalance(body))

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(self.interval_s):
            try:
                self.poll_once()
                failures = 0
            except (OSError, ValueError, KeyError) as exc:
                failures += 1
                # Off EC2 there is no metadata service; say so once, keep trying quietly.
                if failures == 1:
                    log.info("instance metadata not reachable at %s (%s)", self.base_url, exc)
            if self._seen_interruption:
                return

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True, name="spot-watcher").start()

    def stop(self) -> None:
        self._stop.set()
