"""The soak's fault schedule (pure): which faults, of what size, and when, drawn from a seed so a
failing run can be replayed with the same faults in the same order (the worker each one hits is
drawn from the same seed among those busy at the time).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("kill", "stop", "partition", "store", "redis")
"""kill: SIGKILL a worker's process group (a new worker takes its place). stop: SIGSTOP it past
the lease, then SIGCONT (a stale writer wakes). partition: cut its connections to Redis and the
store past the lease. store: a burst of faults from the shared store proxy. redis: every key lost
(FLUSHALL, or Redis killed, its data wiped and `farm up` run again)."""

WEIGHTS = {"kill": 3, "stop": 2, "partition": 2, "store": 3}
"""How often each kind is drawn; Redis losses are placed, not drawn (see schedule)."""
STORE_VARIANTS = ("503", "reset", "slow")
REDIS_VARIANTS = ("flushall", "restart")
GAP_S = (4.0, 16.0)
"""Seconds between one fault's end and the next one's start, drawn uniformly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    kind: str
    variant: str = ""
    """store: 503 (a burst of 503 SlowDown), reset (connections reset mid-answer), slow (bodies
    trickled); redis: flushall or restart."""
    at_s: float
    """Seconds into the soak it is due (it starts later where the fault before it ran long)."""
    hold_s: float = 0.0
    """stop, partition, slow: how long it lasts; 503, reset: the longest it waits to be spent."""
    count: int = 0
    """503, reset: how many requests it hits."""

    @property
    def label(self) -> str:
        return f"{self.kind} ({self.variant})" if self.variant else self.kind


def draw(rng: random.Random, kind: str, at_s: float, lease_s: float) -> Fault:
    """One fault of `kind`, its size drawn."""
    if kind in ("stop", "partition"):  # past the lease, so the chunk is taken back meanwhile
        return Fault(
            kind=kind, at_s=at_s, hold_s=round(rng.uniform(lease_s + 3, 2 * lease_s + 4), 1)
        )
    if kind == "store":
        variant = rng.choice(STORE_VARIANTS)
        if variant == "slow":
            return Fault(kind=kind, variant=variant, at_s=at_s, hold_s=round(rng.uniform(8, 20), 1))
        count = rng.randint(10, 40) if variant == "503" else rng.randint(3, 8)
        return Fault(kind=kind, variant=variant, at_s=at_s, hold_s=30.0, count=count)
    if kind == "redis":
        return Fault(kind=kind, variant=rng.choice(REDIS_VARIANTS), at_s=at_s)
    if kind == "kill":
        return Fault(kind=kind, at_s=at_s)
    raise ValueError(f"unknown fault kind {kind!r}; choose from {', '.join(KINDS)}")


def schedule(seed: int, window_s: float, lease_s: float, only: tuple[str, ...] = ()) -> list[Fault]:
    """The faults of a soak of `window_s`. `only`: exactly these, in an order drawn from the
    seed, spread evenly over the window. Else drawn by WEIGHTS, GAP_S apart, with Redis losses
    placed among them: one in a run of 10 minutes or less, else one of each variant (a third and
    two thirds in)."""
    rng = random.Random(seed)
    if only:
        kinds = list(only)
        rng.shuffle(kinds)
        slot = window_s / len(kinds)
        return [draw(rng, kind, round(i * slot + slot * 0.2, 1), lease_s)
                for i, kind in enumerate(kinds)]  # fmt: skip
    faults: list[Fault] = []
    at = rng.uniform(*GAP_S)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    while at < window_s:
        fault = draw(rng, rng.choices(kinds, weights)[0], round(at, 1), lease_s)
        faults.append(fault)
        at += fault.hold_s / 2 + rng.uniform(*GAP_S)  # a burst to spend ends before its hold
    if window_s <= 600:
        losses = [Fault(kind="redis", variant=rng.choice(REDIS_VARIANTS),
                        at_s=round(rng.uniform(0.3, 0.7) * window_s, 1))]  # fmt: skip
    else:
        first, second = rng.sample(REDIS_VARIANTS, 2)
        losses = [Fault(kind="redis", variant=first, at_s=round(window_s / 3, 1)),
                  Fault(kind="redis", variant=second, at_s=round(2 * window_s / 3, 1))]  # fmt: skip
    return sorted(faults + losses, key=lambda f: f.at_s)
