"""A discrete-event simulation (heapq) of a spot GPU fleet rendering one job with the farm's own
planner (farm.core.plan), chunk sizing (farm.core.chunking) and retry policy (farm.core.backoff
with the worker's cap, Settings.max_attempts / max_lost_leases). Deterministic for a seed; the same seed gives every policy the same
frame times, boot times and reclaim times (common random numbers), so policies compare fairly.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field

from bench.simspec import Fleet, Outcome, Workload
from bench.simsplit import Splitting
from bench.simtime import Book
from farm.core import chunking, cost
from farm.core.backoff import backoff_s
from farm.core.plan import Chunk, plan_chunks
from farm.core.spec import FrameRange
from workers.attempt.policy import RETRY_CAP_S

__all__ = ["Fleet", "Outcome", "Workload", "estimate", "simulate"]

ORPHAN_S = 60.0
"""Work with no message and no claim is sent again after this (farm.control.reconcile orphan_after_s)."""


@dataclass(slots=True)
class _Task:
    kind: str
    chunk: int
    started: float
    saves: list[tuple[int, float]] = field(default_factory=list)
    """(frame, time its save completes) for a render."""
    crash_at: float = math.inf
    startup_s: float = 0.0
    """Blender start-up this render pays: S, or 0 on a warm Blender."""


@dataclass(slots=True)
class _Instance:
    launched: float
    alive: bool = True
    ready: bool = False
    ended: float = math.inf
    task: _Task | None = None
    prefer_encode: bool = False
    ready_at: float = math.inf
    """When its boot ends (whether or not it lives that long)."""
    warm: bool = False
    """Its Blender has the job's scene open (a clean render ended on it)."""
    lane: _Task | None = None
    """The encode running beside its renders (Fleet.encode_alongside)."""
    lane_until: float = 0.0


class Sim(Splitting):
    def __init__(
        self,
        work: Workload,
        fleet: Fleet,
        chunk_size: int,
        seed: int = 1,
        remembered: bool = False,
        splits: bool = False,
    ) -> None:
        self.w, self.f, self.seed = work, fleet, seed
        self.splits, self.split_count, self.looking = splits, 0, False
        self.renders: dict[int, _Task] = {}
        """Instance -> the render task it is running (what an idle worker may split)."""
        self.auto = chunk_size == chunking.AUTO
        self.frames = FrameRange(first=1, last=work.frames)
        rng = random.Random(f"{seed}:frames")
        sigma = math.sqrt(math.log(1 + work.frame_cv**2))
        self.frame_t = [
            work.frame_s * math.exp(rng.gauss(0, sigma) - sigma**2 / 2) for _ in range(work.frames)
        ]
        self.events: list[tuple[float, int, str, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.inst: list[_Instance] = []
        self.render_q: deque[int] = deque()
        self.idle: deque[int] = deque()
        self.encode_q: deque[int] = deque()
        self.saved: set[int] = set()
        self.failures: dict[int, int] = {}
        self.hits: dict[int, int] = {}
        self.done = 0
        self.planning = self.auto
        self.chosen = chunk_size
        self.failed = ""
        self.finished = math.inf
        self.lost_s = self.startup_s = 0.0
        self.reclaims = 0
        self.book = Book()
        self.timed: list[float] = []
        self.startups: list[float] = []
        self.remembered = self.auto and remembered
        if self.remembered:
            # An earlier job of the scene measured it: sized at submit, as farm.control.jobs does.
            m = chunking.Measurement(startup_s=work.startup_s, frame_s=work.frame_s)
            chunks, plan = chunking.initial_plan(self.frames, chunk_size, self._pool(), m)
            self.chunks = {c.index: c for c in chunks}
            self.chosen, self.planning = int(plan["chunk_size"]), False
        elif self.auto:
            self.chunks = {c.index: c for c in chunking.probe_wave(self.frames, fleet.gpus)}
            self.probe = tuple(self.chunks.values())
            self.planning = sum(len(c.frames) for c in self.probe) < work.frames
            self.chosen = chunking.PROBE_FRAMES
        else:
            self.chunks = {c.index: c for c in plan_chunks(self.frames, chunk_size)}
        self.render_q.extend(sorted(self.chunks))

    def _at(self, t: float, kind: str, who: int, data: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, who, data))

    def _launch(self, n: int) -> None:
        idx = len(self.inst)
        rng = random.Random(f"{self.seed}:instance:{n}")
        boot = self.f.boot_s * rng.uniform(0.75, 1.25)
        self.inst.append(_Instance(launched=self.now, ready_at=self.now + boot))
        self.startup_s += boot
        self._at(self.now + boot, "ready", idx)
        lam = self.f.interruption_per_h / 3600
        if lam > 0:
            self._at(self.now + rng.expovariate(lam), "reclaim", idx, n)

    def run(self) -> Outcome:
        for n in range(self.f.gpus):
            self._launch(n)
        while self.events and self.finished == math.inf and not self.failed:
            self.now, _, kind, who, data = heapq.heappop(self.events)
            getattr(self, "_on_" + kind)(who, data)
        end = self.finished if not self.failed else self.now
        initial = self.inst[: self.f.gpus]
        fleet_up = sum(i.ready_at for i in initial) / len(initial) if initial else 0.0
        gpu_s = sum(min(i.ended, end) - i.launched for i in self.inst if i.launched < end)
        ideal = self.w.frames * self.w.frame_s / self.f.gpus
        replacing = sum(
            min(i.ready_at, i.ended, self.book.last_render) - i.launched
            for i in self.inst[self.f.gpus :]
            if i.launched < self.book.last_render
        )
        return Outcome(
            policy=("auto*" if self.remembered else "auto") if self.auto else str(self.chosen),
            chunk_size=self.chosen,
            chunks=len(self.chunks),
            makespan_s=end,
            ideal_s=ideal,
            gpu_hours=gpu_s / 3600,
            lost_h=self.lost_s / 3600,
            startup_h=self.startup_s / 3600,
            interruptions=self.reclaims,
            failed=self.failed,
            most_lost_leases=max(self.hits.values(), default=0),
            fleet_up_s=fleet_up,
            splits=self.split_count,
            breakdown=self.book.breakdown(
                gpus=self.f.gpus,
                fleet_up_s=fleet_up,
                ideal_s=ideal,
                frames_ideal_s=self.w.frames * self.w.frame_s,
                replacement_boot_s=replacing,
                end_s=end,
            ),
        )

    # ── events ────────────────────────────────────────────────────────────────────────────
    def _on_ready(self, who: int, _: object) -> None:
        inst = self.inst[who]
        if inst.alive:
            inst.ready = True
            self._assign(who)

    def _on_reclaim(self, who: int, n: object) -> None:
        inst = self.inst[who]
        if not inst.alive or self.now >= self.finished:
            return
        inst.alive, inst.ended = False, self.now
        self.reclaims += 1
        self.book.busy(who, self.now, self.planning)
        for task in (inst.task, inst.lane):
            if task is None:
                continue
            if task.kind == "wait" or task.started > self.now:
                # Its render was recorded and its encode not yet claimed: no lease to expire,
                # the reconciler sends the orphan again.
                self._at(self.now + ORPHAN_S, "requeue", task.chunk, "encode")
                continue
            if task is inst.task:
                self._account(task)
                self._cut_short(task)  # (an encode beside it takes no render time to lose)
            # Without a spot notice nobody hands it back: the lease expires (renewed every lease/3)
            # and a reconcile pass takes it back, spending one of the chunk's lost-lease budget
            # (the ledger's 'expire' mode), not one of its failures.
            lane = "" if task is inst.task else ":lane"
            rng = random.Random(f"{self.seed}:detect:{self.reclaims}{lane}")
            detect = rng.uniform(self.f.lease_s * 2 / 3, self.f.lease_s)
            detect += rng.uniform(0, self.f.reconcile_s)
            self.hits[task.chunk] = self.hits.get(task.chunk, 0) + 1
            if self.hits[task.chunk] >= self.f.max_lost_leases:
                self.failed = f"chunk {task.chunk} lost its worker {self.hits[task.chunk]} times"
            else:
                self._at(self.now + detect, "requeue", task.chunk, task.kind)
        self._launch(self.f.gpus + self.reclaims)  # the auto-scaling group replaces it

    def _cut_short(self, task: _Task) -> None:
        if task.kind == "render":
            kept = [t for f, t in task.saves if t <= self.now]
            for f, t in task.saves:
                if t <= self.now:
                    self.saved.add(f)
            begun = task.started + self.w.task_latency_s + task.startup_s
            self.lost_s += max(self.now - max(kept[-1] if kept else begun, begun), 0.0)
            self.startup_s += min(max(self.now - task.started, 0.0), task.startup_s)
        else:
            self.lost_s += self.now - task.started

    def _spend_failure(self, chunk: int, why: str) -> bool:
        self.failures[chunk] = self.failures.get(chunk, 0) + 1
        if self.failures[chunk] >= self.f.max_attempts:
            self.failed = f"chunk {chunk} failed {self.failures[chunk]} times: {why}"
            return False
        return True

    def _on_requeue(self, chunk: int, kind: object) -> None:
        (self.render_q if kind == "render" else self.encode_q).append(chunk)
        self._wake()

    def _on_done(self, who: int, task: object) -> None:
        inst = self.inst[who]
        if not inst.alive or inst.task is not task:
            return
        assert isinstance(task, _Task)
        inst.task = None
        self._account(task)
        if task.kind == "render":
            inst.warm = self.f.warm_blender and task.crash_at == math.inf
            if self._render_done(who, task):
                return  # waits for the encode beside it to end (_on_lane_free)
        elif task.kind == "encode":
            if self._encoded(who):
                return
        else:
            self.finished = self.now
            return
        self._assign(who)
        self._wake()

    def _encoded(self, who: int) -> bool:
        """A chunk's encode ended on `who`; true when it was the last and `who` stitches."""
        self.done += 1
        if self.planning or self.done < len(self.chunks):
            return False
        # Every chunk is rendered, so `who` renders nothing now (its lane may have held the last).
        assert self.inst[who].task is None
        if who in self.idle:
            self.idle.remove(who)
        self._start(who, _Task(kind="stitch", chunk=-1, started=self.now), self.w.stitch_s)
        return True

    def _on_lane_done(self, who: int, task: object) -> None:
        inst = self.inst[who]
        if inst.alive and inst.lane is task:
            inst.lane = None
            self._encoded(who)

    def _on_lane_free(self, who: int, _: object) -> None:
        """A render that ended while the lane was busy hands its encode now and goes on."""
        inst = self.inst[who]
        pending = inst.task
        if not inst.alive or pending is None or pending.kind != "wait":
            return
        inst.task = None
        self._to_lane(who, pending.chunk)
        self._assign(who)
        self._wake()

    def _to_lane(self, who: int, chunk: int) -> None:
        inst = self.inst[who]
        n = len(self.chunks[chunk].frames)
        start = self.now + self.w.task_latency_s
        end = start + self.w.encode_startup_s + n * self.w.encode_frame_s
        inst.lane = _Task(kind="encode", chunk=chunk, started=start)
        inst.lane_until = end
        self._at(end, "lane_done", who, inst.lane)

    def _render_done(self, who: int, task: _Task) -> bool:
        """Book a render that ended and hand its encode on; true when `who` waits for its lane."""
        if task.crash_at < math.inf:
            self._cut_short(task)
            failures = self.failures.get(task.chunk, 0) + 1
            if self._spend_failure(task.chunk, "Blender crashed"):
                # The middle of the worker's jitter: the run stays deterministic for its seed.
                delay_s = backoff_s(failures, cap_s=RETRY_CAP_S, jitter=0.5)
                self._at(self.now + delay_s, "requeue", task.chunk, "render")
            return False
        self.saved.update(f for f, _ in task.saves)
        self.book.last_render = self.now
        if task.saves:  # the chunk's frame_s, as the worker records it (farm.core.split reads them)
            begun = task.started + self.w.task_latency_s
            m = chunking.measure_saved_times([t - begun for _, t in task.saves])
            bisect.insort(self.timed, m.frame_s)
            bisect.insort(self.startups, m.startup_s)
        self.startup_s += task.startup_s
        if self.planning and task.chunk < len(self.probe) and task.saves:
            self._plan(task)
        inst = self.inst[who]
        if not self.f.encode_alongside:
            self._at(self.now + self.w.task_latency_s, "requeue", task.chunk, "encode")
            return False
        if inst.lane is None:
            self._to_lane(who, task.chunk)
            return False
        # One encode at a time: the render task waits for the one before to end.
        inst.task = _Task(kind="wait", chunk=task.chunk, started=self.now)
        self.book.busy(who, self.now, self.planning)
        self._at(inst.lane_until, "lane_free", who)
        return True

    def _plan(self, task: _Task) -> None:
        begun = task.started + self.w.task_latency_s
        m = chunking.measure_saved_times([t - begun for _, t in task.saves], "probe chunk")
        pool = self._pool(workers=sum(1 for i in self.inst if i.alive))
        left = self.w.frames - sum(len(c.frames) for c in self.probe)
        choice = chunking.choose_chunk_size(frames=left, m=m, pool=pool)
        rest = chunking.rest_after(self.frames, self.probe, choice.chunk_size)
        self.chunks.update({c.index: c for c in rest})
        self.render_q.extend(c.index for c in rest)
        self.chosen, self.planning = choice.chunk_size, False

    def _account(self, task: _Task) -> None:
        """Book the GPU-seconds of a task that ended now (done, cut short or reclaimed)."""
        if task.kind == "render":
            frames_s = sum(self.frame_t[f - 1] for f, t in task.saves if t <= self.now)
            startup_s = self.w.task_latency_s + task.startup_s
            self.book.render(self.now - task.started, startup_s, frames_s)
        elif task.kind == "encode":
            self.book.encodes.append((task.started, self.now))

    def _pool(self, workers: int = 0) -> chunking.Pool:
        return pool_of(self.f, workers, splits=self.splits)

    # ── scheduling ────────────────────────────────────────────────────────────────────────
    def _wake(self) -> None:
        while self.idle and (self.render_q or self.encode_q):
            who = self.idle.popleft()
            inst = self.inst[who]
            if inst.alive and inst.task is None:
                self._assign(who)

    def _assign(self, who: int) -> None:
        inst = self.inst[who]
        if not (self.render_q or self.encode_q):
            if not self._split_for(who):
                self.idle.append(who)
                self.book.idle(who, self.now, self.planning)
                self._look_later()
            return
        queues = [self.encode_q, self.render_q]
        if not inst.prefer_encode:
            queues.reverse()
        inst.prefer_encode = not inst.prefer_encode  # kombu cycles the queues it consumes
        for q in queues:
            if q:
                chunk = q.popleft()
                if q is self.render_q:
                    self._start_render(who, self.chunks[chunk])
                else:
                    n = len(self.chunks[chunk].frames)
                    cost = self.w.encode_startup_s + n * self.w.encode_frame_s
                    task = _Task(kind="encode", chunk=chunk, started=self.now)
                    self._start(who, task, self.w.task_latency_s + cost)
                return

    def _start_render(self, who: int, chunk: Chunk) -> None:
        startup_s = 0.0 if self.inst[who].warm else self.w.startup_s
        task = _Task(kind="render", chunk=chunk.index, started=self.now, startup_s=startup_s)
        t = self.now + self.w.task_latency_s + startup_s
        todo = [f for f in chunk.frames if f not in self.saved]
        tries = self.failures.get(chunk.index, 0)
        crash = random.Random(f"{self.seed}:crash:{chunk.index}:{tries}")
        crash_frame = crash.randrange(len(todo)) if todo and crash.random() < self.w.crash_p else -1
        for i, frame in enumerate(todo):
            t += self.frame_t[frame - 1]
            if i == crash_frame:
                task.crash_at = t
                break
            task.saves.append((frame, t))
        self._start(who, task, (task.crash_at if task.crash_at < math.inf else t) - self.now)

    def _start(self, who: int, task: _Task, duration_s: float) -> None:
        self.book.busy(who, self.now, self.planning)
        self.inst[who].task = task
        self.renders.pop(who, None)
        if task.kind == "render":
            self.renders[who] = task
            if self.idle:  # an idle worker may split it at its next look
                self._look_later()
        self._at(self.now + duration_s, "done", who, task)


def pool_of(fleet: Fleet, workers: int = 0, splits: bool = False) -> chunking.Pool:
    """The fleet as farm.core.chunking's sizing rule (and farm.core.cost's estimate) sees it."""
    return chunking.Pool(
        workers=workers or fleet.gpus,
        interruption_per_h=fleet.interruption_per_h,
        detect_s=fleet.lease_s + fleet.reconcile_s,
        boot_s=fleet.boot_s,
        splits=splits,
        warm_blender=fleet.warm_blender,
    )


def estimate(work: Workload, fleet: Fleet, chunk_size: int, splits: bool = False) -> cost.Estimate:
    """What `farm submit --estimate` says of this job on this fleet, given its S and F: the same
    function, plan and prices the farm uses (whose workers split: `splits`)."""
    m = chunking.Measurement(startup_s=work.startup_s, frame_s=work.frame_s)
    price = cost.Price(on_demand_h=fleet.on_demand_price_h, spot_h=fleet.spot_price_h)
    pool = pool_of(fleet, splits=splits)
    return cost.estimate(frames=work.frames, chunk_size=chunk_size, m=m, pool=pool, price=price)


def simulate(
    work: Workload,
    fleet: Fleet,
    chunk_size: int,
    seed: int = 1,
    remembered: bool = False,
    splits: bool = False,
) -> Outcome:
    """One run. chunk_size farm.core.chunking.AUTO probes first and sizes the rest as the farm does;
    with `remembered`, an earlier job's measurement sizes the whole job at submit (policy auto*);
    with `splits`, idle workers split running chunks as the farm's workers do (farm.core.split)."""
    return Sim(work, fleet, chunk_size, seed, remembered, splits).run()
