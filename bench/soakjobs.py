"""The soak's jobs: short render jobs of the grey scene (bench/greys.py), each a random run of its
frames in chunks of 2 to 4, submitted with `farm submit` as a user would, whenever fewer than
`live` of them are unfinished, so the workers are kept busy."""

from __future__ import annotations

import json
import logging
import math
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from bench import greys
from bench.soakwatch import Watch
from tests.conftest import LocalFarm

log = logging.getLogger(__name__)

SAMPLES = (512, 768, 1024)
"""Cycles samples without adaptive sampling: 0.3 to 0.7 s a frame here, so a fault often lands
on a chunk mid-render."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Asked:
    job_id: str
    first: int
    last: int
    chunk_size: int
    samples: int

    @property
    def frames(self) -> list[int]:
        return list(range(self.first, self.last + 1))

    @property
    def chunks(self) -> int:
        """As planned at submit (an idle worker's split adds one more to the ledger's count)."""
        return math.ceil(len(self.frames) / self.chunk_size)


def draw(rng: random.Random) -> tuple[int, int, int, int]:
    """A job: (first frame, last frame, chunk size, samples)."""
    count = rng.randint(4, greys.FRAMES)
    first = rng.randint(1, greys.FRAMES - count + 1)
    return first, first + count - 1, rng.randint(2, 4), rng.choice(SAMPLES)


@dataclass(slots=True)
class Submitter:
    farm: LocalFarm
    scene: Path
    watch: Watch
    rng: random.Random
    live: int
    asked: list[Asked] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Submits that failed, with what `farm submit` said."""
    _paused: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def pause(self) -> None:
        """No submit from now on (one under way ends first) until `resume`: the soak's Redis
        losses, so each job it submitted is in the ledger or refused, never half recorded."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False

    def start(self) -> Submitter:
        self._thread = threading.Thread(target=self._loop, name="soak-submit", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(600)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                busy = self._paused or len(self.watch.live()) >= self.live
                if not busy:
                    self.submit()
            if busy:
                self._stop.wait(0.3)

    def submit(self) -> None:
        first, last, size, samples = draw(self.rng)
        done = self.farm.farm(
            "submit", str(self.scene), "--frames", f"{first}-{last}", "--chunk-size", str(size),
            "--samples", str(samples), "--json", timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            self.refused.append(said[-1] if said else f"exit {done.returncode}")
            log.warning("soak: farm submit failed: %s", self.refused[-1])
            self._stop.wait(2.0)
            return
        job_id = str(json.loads(done.stdout)["id"])
        self.asked.append(Asked(job_id=job_id, first=first, last=last, chunk_size=size,
                                samples=samples))  # fmt: skip
        self.watch.add(job_id)
