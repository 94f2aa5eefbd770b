"""The soak's faults, injected one at a time as the schedule (bench/soakplan.py) says: each one is
recorded with when it started and ended, the worker it hit and the chunks that worker held."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field

from bench.soakfarm import SoakFarm, Worker
from bench.soakjobs import Submitter
from bench.soakplan import Fault
from bench.soakwatch import Watch
from farm.core.pipeline import running_states

log = logging.getLogger(__name__)

BUSY_WAIT_S = 10.0
"""How long a worker fault waits for a worker that holds a chunk before taking an idle one."""
REBUILD_WAIT_S = 300.0
MIN_GAP_S = 2.0


@dataclass(slots=True, kw_only=True)
class Injected:
    fault: Fault
    start: float
    """time.monotonic() as it began; `end` as it was over (the worker woken, the proxy back to
    normal, Redis answering again; a kill is over as it is done)."""
    end: float = 0.0
    worker: str = ""
    hit: list[tuple[str, int, str]] = field(default_factory=list)
    """(job, chunk, token) of each chunk the worker held as the fault began."""
    injected: dict[str, int] = field(default_factory=dict)
    """What the proxies counted (requests answered 503, connections cut, ...)."""
    note: str = ""


class Injector:
    def __init__(self, soak: SoakFarm, watch: Watch, submitter: Submitter, rng: random.Random):
        self.soak = soak
        self.watch = watch
        self.submitter = submitter
        """Paused while Redis is lost and until the ledger is rebuilt: no submit meanwhile."""
        self.rng = rng
        self.done: list[Injected] = []
        self.errors: list[str] = []
        """Faults that could not be injected, and why (the soak goes on without them)."""

    def run(self, faults: list[Fault], t0: float, window_s: float) -> list[Injected]:
        """Each fault in turn, at its time or as soon as the one before it is over."""
        free_at = t0
        for fault in faults:
            due = max(t0 + fault.at_s, free_at + MIN_GAP_S)
            if due >= t0 + window_s:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                record = self.inject(fault)
            except Exception as exc:  # e.g. `farm up` failing to bring Redis back: said, not hidden
                self.errors.append(f"{fault.label} at {time.monotonic() - t0:.0f} s: {exc}")
                log.warning("soak: %s", self.errors[-1])
                free_at = time.monotonic()
                continue
            self.done.append(record)
            asked, live = len(self.submitter.asked), len(self.watch.live())
            log.warning("soak: %s at %.0f s: %s; %d jobs submitted, %d of them running",
                        fault.label, record.start - t0,
                        " ".join(filter(None, (record.worker, record.note))), asked, live)  # fmt: skip
            free_at = time.monotonic()
        return self.done

    def inject(self, fault: Fault) -> Injected:
        if fault.kind in ("kill", "stop", "partition"):
            return self._worker_fault(fault)
        if fault.kind == "store":
            return self._store_fault(fault)
        return self._redis_loss(fault)

    def _held(self) -> dict[str, list[tuple[str, int, str]]]:
        """Each worker's running chunks, as the ledger says now."""
        ledger = self.soak.farm.ledger()
        held: dict[str, list[tuple[str, int, str]]] = {}
        running = {str(s) for s in running_states()}
        for job_id in self.watch.live():
            for chunk in ledger.chunks(job_id):
                if chunk.get("state") in running and chunk.get("worker"):
                    held.setdefault(chunk["worker"], []).append(
                        (job_id, int(chunk["index"]), chunk.get("token", ""))
                    )
        return held

    def _pick(self) -> tuple[Worker, list[tuple[str, int, str]]]:
        """A worker that holds a chunk, drawn; after BUSY_WAIT_S with none, any worker."""
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            try:
                held = self._held()
            except Exception as exc:  # the ledger out of reach a moment: look again
                log.debug("soak: reading the chunks held: %s", exc)
                held = {}
            busy = [w for w in self.soak.workers if held.get(w.name)]
            if busy or time.monotonic() > deadline:
                worker = self.rng.choice(busy or self.soak.workers)
                return worker, held.get(worker.name, [])
            time.sleep(0.25)

    def _worker_fault(self, fault: Fault) -> Injected:
        worker, hit = self._pick()
        record = Injected(fault=fault, start=time.monotonic(), worker=worker.name, hit=hit)
        if fault.kind == "kill":
            replacement = self.soak.kill(worker)
            record.note = f"replaced by {replacement.name}"
        elif fault.kind == "stop":
            self.soak.stop(worker)
            time.sleep(fault.hold_s)
            self.soak.wake(worker)
            record.note = f"stopped {fault.hold_s} s"
        else:
            cut = self.soak.partition(worker, fault.hold_s)
            time.sleep(fault.hold_s)
            record.injected = {"connections cut": cut}
            record.note = f"cut off {fault.hold_s} s ({cut} connections cut)"
        record.end = time.monotonic()
        return record

    def _store_fault(self, fault: Fault) -> Injected:
        proxy = self.soak.store
        label = {"503": "503 SlowDown", "reset": "reset", "slow": "slow"}[fault.variant]
        before = proxy.injected().get(label, 0)
        record = Injected(fault=fault, start=time.monotonic())
        if fault.variant == "503":
            proxy.error(503, "SlowDown", count=fault.count)
        elif fault.variant == "reset":
            proxy.reset(count=fault.count, fraction=0.3, after_bytes=600)
        else:
            proxy.slow(bytes_per_s=self.rng.choice((32_000, 64_000, 128_000)))
        deadline = record.start + fault.hold_s
        while time.monotonic() < deadline:
            if fault.count and proxy.injected().get(label, 0) - before >= fault.count:
                break  # the burst is spent
            time.sleep(0.2)
        proxy.clear()
        record.end = time.monotonic()
        record.injected = {label: proxy.injected().get(label, 0) - before}
        record.note = f"{record.injected[label]} requests {label}"
        return record

    def _redis_loss(self, fault: Fault) -> Injected:
        self.submitter.pause()
        record = Injected(fault=fault, start=time.monotonic())
        try:
            if fault.variant == "flushall":
                self.soak.flush_redis()
            else:
                self.soak.restart_redis()
            record.end = time.monotonic()
            ledger = self.soak.farm.ledger()
            deadline = record.end + REBUILD_WAIT_S
            while ledger.mark() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            rebuilt = time.monotonic() - record.end
            record.note = (f"ledger rebuilt {rebuilt:.1f} s after" if ledger.mark() is not None
                           else f"no rebuild in {REBUILD_WAIT_S:.0f} s")  # fmt: skip
        finally:
            self.submitter.resume()
        return record
