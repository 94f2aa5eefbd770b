"""No idle tail in the simulation (bench/sim.py): a freed worker looks for a running render to split
at once and, while idle, every second after, as workers/phases/splitter.py does, and splits it by
farm.core.split's own rule.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque
from typing import TYPE_CHECKING, Any

from farm.core import split
from farm.core.plan import Chunk

if TYPE_CHECKING:
    from bench.simspec import Fleet, Workload

SPLIT_LOOK_S = 1.0
"""An idle worker looks for a chunk to split this often (workers/phases/splitter.py EVERY_S)."""


class Splitting:
    """bench.sim.Sim's splitting half; Sim holds the state."""

    w: Workload
    f: Fleet
    now: float
    inst: list[Any]
    renders: dict[int, Any]
    idle: deque[int]
    render_q: deque[int]
    encode_q: deque[int]
    chunks: dict[int, Chunk]
    frame_t: list[float]
    timed: list[float]
    """Finished renders' measured frame times, sorted (the chunks' `frame_s`)."""
    startups: list[float]
    """Finished renders' measured start-ups, sorted (the chunks' `blender_startup_s`)."""
    splits: bool
    split_count: int
    looking: bool
    planning: bool

    if TYPE_CHECKING:

        def _at(self, t: float, kind: str, who: int, data: object = None) -> None: ...
        def _start(self, who: int, task: Any, duration_s: float) -> None: ...
        def _start_render(self, who: int, chunk: Chunk) -> None: ...

    def _look_later(self) -> None:
        """Idle workers look for a chunk to split every SPLIT_LOOK_S, as workers/phases/splitter.py."""
        if self.splits and not self.looking:
            self.looking = True
            self._at(self.now + SPLIT_LOOK_S, "look", -1)

    def _on_look(self, _: int, __: object) -> None:
        self.looking = False
        while self.idle:
            who = self.idle.popleft()
            inst = self.inst[who]
            # One that finds nothing to split means none can: they all see the same chunks.
            if inst.alive and inst.task is None and not self._split_for(who):
                self.idle.appendleft(who)
                break
        if self.idle and any(self.inst[o].task is t for o, t in self.renders.items()):
            self._look_later()

    def _job_frame_s(self) -> float:
        return _median(self.timed)

    def _split_for(self, who: int) -> bool:
        """An idle worker with nothing queued splits the running render with the most frames
        left, by the farm's rule, and renders the rest itself. False when none can be split."""
        if not self.splits or self.planning or self.render_q or self.encode_q:
            return False
        # The farm's render workers hear of a split of their chunk at once (workers.attempt.wake).
        lag_s = split.WAKE_LAG_S
        # As farm.core.split.choose: none on a warm Blender (the splitter takes the new chunk), else
        # the start-up the job's finished chunks measured.
        startup_s = 0.0 if self.inst[who].warm else _median(self.startups)
        best: tuple[int, int, int] | None = None  # (moved, owner, last frame)
        for owner, task in self.renders.items():
            inst = self.inst[owner]
            if not inst.alive or inst.task is not task or not task.saves:
                continue
            n_done = bisect.bisect_right(task.saves, self.now, key=lambda s: s[1])
            ahead = len(task.saves) - n_done - 1
            if ahead < split.MIN_REST or (best is not None and ahead <= best[0]):
                continue  # cannot beat the best found: at most what is ahead moves
            frames = [f for f, _ in task.saves]
            first = frames[0]
            on = frames[n_done] if self.now >= task.saves[0][1] - self.frame_t[first - 1] else None
            # The owner's mean frame time so far (frame_s_live), else the job's finished chunks'.
            rendered = [self.frame_t[f - 1] for f, _ in task.saves[:n_done]]
            frame_s = sum(rendered) / len(rendered) if rendered else self._job_frame_s()
            # When it began the frame it is on (frame_on_at, as the farm records it).
            began = (
                task.saves[n_done - 1][1] if n_done else task.saves[0][1] - self.frame_t[first - 1]
            )
            last = split.owner_split(
                frames, on, frame_s=frame_s, began_s=began, now=self.now, lag_s=lag_s,
                startup_s=startup_s,
            )  # fmt: skip
            if last is not None:
                moved = sum(1 for f in frames if f > last)
                if best is None or moved > best[0]:
                    best = (moved, owner, last)
        if best is None:
            return False
        _, owner, last = best
        task = self.renders[owner]
        kept = [(f, t) for f, t in task.saves if f <= last]
        crash_at = task.crash_at if task.crash_at <= kept[-1][1] else math.inf
        cut = dataclasses.replace(task, saves=kept, crash_at=crash_at)
        old = self.chunks[task.chunk]
        self.chunks[task.chunk] = Chunk(
            index=old.index, frames=tuple(f for f in old.frames if f <= last)
        )
        new = Chunk(index=max(self.chunks) + 1, frames=tuple(f for f in old.frames if f > last))
        self.chunks[new.index] = new
        self.split_count += 1
        self._start(
            owner, cut, (cut.crash_at if cut.crash_at < math.inf else kept[-1][1]) - self.now
        )
        self._start_render(who, new)
        return True


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2 if n else 0.0
