"""The job page's players as a user sees them: headless Chromium opens a page of the farm's and
watches a <video> element play (tests/e2e/test_encode_ladder.py, test_encode_mkv.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.conftest import LocalFarm
from tests.e2e.test_web_live import _auth, _chromium


class Browser:
    """Headless Chromium driven over its DevTools pipe (fds 3 and 4, NUL-separated JSON): a
    page that plays media is watched as it plays, which --dump-dom's virtual time cannot do."""

    def __init__(self, profile: Path) -> None:
        commands, self._to = os.pipe()
        self._from, answers = os.pipe()

        def wire() -> None:  # the child's fd 3 reads commands, fd 4 writes answers
            os.dup2(commands, 3)
            os.dup2(answers, 4)

        argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--autoplay-policy=no-user-gesture-required", "--remote-debugging-pipe",
                f"--user-data-dir={profile}", "about:blank"]  # fmt: skip
        self.process = subprocess.Popen(argv, preexec_fn=wire, close_fds=False,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(commands)
        os.close(answers)
        self._next, self._buffer = 0, b""

    def call(self, method: str, session: str = "", **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from, 1 << 16)
                assert chunk, "chromium closed its DevTools pipe"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._next:
                assert "error" not in answer, answer
                result: dict[str, Any] = answer["result"]
                return result

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        os.close(self._to)
        os.close(self._from)


WATCH = """(() => { const v = document.getElementById(%s);
  if (!v) return "{}";
  if (v.paused && !v.ended && v.readyState >= 1) { v.muted = true; v.play().catch(() => {}); }
  return JSON.stringify({time: v.currentTime, height: v.videoHeight,
    levels: v.dataset.levels || "",
    shown: (document.getElementById(v.id + "-error") || {}).textContent || "",
    error: v.dataset.error || (v.error ? `media error ${v.error.code}` : "")}); })()"""
"""The player's state; a paused one is started (muted, as a user clicking play would hear)."""


def play(farm: LocalFarm, path: str, tmp: Path, element: str) -> dict[str, Any]:
    """Open `path` on the farm's pages (credentials in the URL, as a user types them) and watch
    its <video id=`element`> until it has played a second, failed, or a minute went by: its
    time, videoHeight, and the ladder player's levels and error."""
    user, password = _auth(farm)
    parts = urlsplit(farm.settings()["web_url"])
    browser = Browser(tmp / "player-profile")
    try:
        target = browser.call("Target.createTarget",
                              url=f"{parts.scheme}://{user}:{password}@{parts.netloc}{path}")  # fmt: skip
        session = browser.call("Target.attachToTarget", targetId=target["targetId"],
                               flatten=True)["sessionId"]  # fmt: skip
        seen: dict[str, Any] = {}
        for _ in range(240):
            watch = WATCH % json.dumps(element)
            found = browser.call("Runtime.evaluate", session, expression=watch)["result"]
            seen = json.loads(found.get("value") or "{}")
            if seen.get("error") or seen.get("time", 0) >= 1.0:
                break
            time.sleep(0.25)
        return seen
    finally:
        browser.close()
