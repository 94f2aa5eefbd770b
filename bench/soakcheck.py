"""The soak's verdict: each job's video decoded and its frames named by their grey (every frame it
asked for once, in order), and, for each fault, how long the farm took to recover from it.

Time to recover (RECOVERY): for a kill, stop or partition of a worker that held chunks, from the
fault's start to the first of those chunks taken back from it (queued again once its lease ran
out and the reconciler saw it, or claimed anew, or ended); for a store fault or a Redis loss, from
the fault's end (the proxy back to normal, Redis answering again) to the farm's next move of any
job (bench/soakwatch.py). Beside it, for worker faults, the time to the chunk's next claim, which
adds its wait in the queue behind the other jobs' chunks. Read every 0.5 s: each is good to about
0.5 s.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import greys
from bench.soakfaults import Injected
from bench.soakjobs import Asked
from bench.soakwatch import Move
from farm.core import keys
from farm.core.errors import FarmError

RECOVERY = (
    "time to recover: for a kill, stop or partition of a worker that held chunks, from the "
    "fault's start to the first of those chunks taken back from it (queued again after its lease "
    "ran out, or claimed anew, or ended); for a store fault or a Redis loss, from the fault's end "
    "to the farm's next chunk move (a claim, a frame recorded, a chunk rendered or done, a job "
    "done); next claim: for worker faults, to the chunk's next claim (its wait in the queue "
    "added); read from the ledger every 0.5 s"
)


@dataclass(slots=True, kw_only=True)
class Verdict:
    job_id: str
    frames: list[int]
    state: str
    shown: list[int | None] | None = None
    """Which frame each frame of the delivered video is (None: a grey no frame has)."""
    why: str = ""

    @property
    def lost(self) -> int:
        """Frames asked for and not in the video (all of them where the job is not done)."""
        if self.state != "done" or self.shown is None:
            return len(self.frames)
        return len(set(self.frames) - set(self.shown))

    @property
    def duplicated(self) -> int:
        """Frames shown more than once, each extra showing counted."""
        if not self.shown:
            return 0
        return sum(n - 1 for n in Counter(self.shown).values() if n > 1)

    @property
    def wrongly_done(self) -> bool:
        """Done in the ledger (or the store), its video not every frame once and in order."""
        return self.state == "done" and self.shown != self.frames

    def to_json(self) -> dict[str, Any]:
        ok = self.state == "done" and not self.wrongly_done
        return {
            "job": self.job_id, "frames": f"{self.frames[0]}-{self.frames[-1]}",
            "state": self.state, "whole": ok, "lost": self.lost, "duplicated": self.duplicated,
            "wrongly_done": self.wrongly_done, "why": self.why,
            **({} if ok or self.shown is None else {"shown": self.shown}),
        }  # fmt: skip


def check_job(store: Any, asked: Asked, state: str, output: str, dest: Path) -> Verdict:
    """One job's verdict: `state` its end, `output` its video's key ('' for the usual one)."""
    verdict = Verdict(job_id=asked.job_id, frames=asked.frames, state=state)
    if state != "done":
        verdict.why = f"ended {state}" if state else "never ended"
        return verdict
    video = dest / f"{asked.job_id}.mp4"
    try:
        store.get_file(output or keys.output_key(asked.job_id), video)
        verdict.shown = greys.frames_shown(video)
    except (FarmError, ValueError, OSError) as exc:
        verdict.why = f"its video cannot be read: {exc}"
        return verdict
    finally:
        video.unlink(missing_ok=True)
    if verdict.shown != verdict.frames:
        verdict.why = f"the video shows frames {verdict.shown}"
    return verdict


@dataclass(slots=True, kw_only=True)
class Recovery:
    seconds: float | None
    """None: not measured (a worker fault that hit an idle worker), or never recovered (`never`)."""
    never: bool = False
    basis: str = ""
    claimed_s: float | None = None
    """Worker faults: to the next claim of a chunk the worker held (or its end)."""


def _taken_back(move: Move, held: dict[tuple[str, int], str], claimed: bool) -> bool:
    """`move` takes a chunk of `held` from the worker: anew under another claim, ended, or
    (unless `claimed`) queued again."""
    if move.what == "job-done":
        return any(job == move.job for job, _ in held)
    if (move.job, move.chunk) not in held:
        return False
    if move.what == "done" or (not claimed and move.what == "requeued"):
        return True
    return move.what == "claim" and move.token != held[(move.job, move.chunk)]


def recovery(fault: Injected, moves: list[Move]) -> Recovery:
    """How long the farm took to recover from `fault` (RECOVERY), from the watch's moves."""
    if fault.fault.kind in ("kill", "stop", "partition"):
        if not fault.hit:
            return Recovery(seconds=None, basis="the worker held no chunk")
        held = {(job, chunk): token for job, chunk, token in fault.hit}
        after = [m for m in moves if m.at >= fault.start]
        back = next((m for m in after if _taken_back(m, held, claimed=False)), None)
        claim = next((m for m in after if _taken_back(m, held, claimed=True)), None)
        if back is None:
            return Recovery(seconds=None, never=True, basis="its chunks were never taken back")
        return Recovery(
            seconds=back.at - fault.start,
            basis=f"{back.what} of {back.job} chunk {back.chunk}",
            claimed_s=None if claim is None else claim.at - fault.start,
        )
    for move in moves:
        if move.at >= fault.end:
            return Recovery(seconds=move.at - fault.end,
                            basis=f"{move.what} of {move.job} chunk {move.chunk}")  # fmt: skip
    return Recovery(seconds=None, never=True, basis="nothing moved after it")
