"""`python -m bench soak [--minutes 20] [--seed N] [--faults kill,stop,...]`: many short jobs on a
local farm of 3 workers under random faults (bench/soakplan.py: workers killed, stopped past the
lease, cut off from Redis and the store; store faults; Redis lost), then every job's video checked
frame by frame. It must show frames lost 0, frames duplicated 0 and jobs wrongly marked done 0;
it also gives the worst time to recover (bench/soakcheck.RECOVERY) and the time to rebuild the
ledger per 1,000 chunks (bench/rebuildtime.py). Not part of `python -m bench` (all) nor `make test`.
"""

from __future__ import annotations

import logging
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import greys, rebuildtime, soakplan
from bench.common import Row
from bench.soakcheck import RECOVERY, Recovery, Verdict, check_job, recovery
from bench.soakfarm import SoakFarm
from bench.soakfaults import Injected, Injector
from bench.soakjobs import Asked, Submitter
from bench.soakwatch import Watch, final_in_store

log = logging.getLogger(__name__)

WORKERS = 3
LIVE_JOBS = 4
"""Unfinished jobs kept submitted: enough to keep 3 workers busy between submits."""
FINISH_S = 1800.0
STALL_S = 300.0
"""After the faults, how long to wait for every job to end at most, and with nothing moving."""


def run(
    quick: bool,
    *,
    minutes: float | None = None,
    seed: int | None = None,
    faults: tuple[str, ...] = (),
    rebuild_chunks: int = 1000,
    work: Path | None = None,
) -> tuple[dict[str, Any], list[Row]]:
    """The soak: `minutes` of jobs under faults (default 20; `quick` 3), the drawn schedule
    or exactly `faults`; then every job waited for and checked, and the rebuild timed."""
    minutes = minutes if minutes is not None else (3.0 if quick else 20.0)
    seed = seed if seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    print(f"soak: seed {seed} (--seed {seed} replays these faults), {minutes:g} min of faults",
          flush=True)  # fmt: skip
    base = work or Path(tempfile.mkdtemp(prefix="farm-soak-"))
    scene = greys.build(base / "greys.blend")
    soak = SoakFarm.start(base / "farm", WORKERS, seed)
    lease_s = float(soak.farm.env["FARM_LEASE_S"])
    plan = soakplan.schedule(seed, minutes * 60, lease_s, faults)
    try:
        watch = Watch(soak.farm).start()
        submitter = Submitter(soak.farm, scene, watch, random.Random(seed + 1), live=LIVE_JOBS)
        injector = Injector(soak, watch, submitter, random.Random(seed + 2))
        t0 = time.monotonic()
        submitter.start()
        try:
            injector.run(plan, t0, minutes * 60)
            time.sleep(max(0.0, t0 + minutes * 60 - time.monotonic()))
        finally:
            submitter.stop()
            soak.store.clear()
        soaked_s = time.monotonic() - t0
        waited_s = _finish(watch)
        watch.stop()
        verdicts = _verdicts(soak, submitter.asked, watch, base)
        rebuilt = rebuildtime.run(soak.farm.admin(), rebuild_chunks)
    finally:
        soak.down()
    result = _result(seed, minutes, lease_s, faults, submitter, injector, watch, verdicts, t0)
    result.update(soaked_s=round(soaked_s, 1), finish_wait_s=round(waited_s, 1), rebuild=rebuilt)
    result["table"] = table(result)
    if result["ok"]:
        shutil.rmtree(base, ignore_errors=True)
    else:
        result["kept"] = str(base)  # the farm's logs, for the post-mortem
    return result, rows(result)


def _finish(watch: Watch) -> float:
    """Until every job ended, FINISH_S passed, or nothing moved for STALL_S; seconds waited."""
    started = time.monotonic()
    while watch.live() and time.monotonic() - started < FINISH_S:
        moves = watch.moves_since(time.monotonic() - STALL_S)
        if not moves and time.monotonic() - started > STALL_S:
            log.warning("soak: nothing moved for %.0f s; %d jobs not ended", STALL_S,
                        len(watch.live()))  # fmt: skip
            break
        time.sleep(1.0)
    return time.monotonic() - started


def _verdicts(soak: SoakFarm, asked: list[Asked], watch: Watch, dest: Path) -> list[Verdict]:
    ledger, store = soak.farm.ledger(), soak.farm.store()
    verdicts = []
    for job in asked:
        held = ledger.job(job.job_id)
        state = (
            held.get("state") or watch.ended.get(job.job_id) or final_in_store(store, job.job_id)
        )
        verdict = check_job(store, job, state, held.get("output", ""), dest)
        if held.get("error"):
            verdict.why += f"; its error: {held['error']}"
        verdicts.append(verdict)
    return verdicts


def _result(
    seed: int,
    minutes: float,
    lease_s: float,
    forced: tuple[str, ...],
    submitter: Submitter,
    injector: Injector,
    watch: Watch,
    verdicts: list[Verdict],
    t0: float,
) -> dict[str, Any]:
    injected, injector_errors = injector.done, injector.errors
    recoveries = [recovery(f, watch.moves) for f in injected]
    measured = [(r.seconds, f) for r, f in zip(recoveries, injected, strict=True)
                if r.seconds is not None]  # fmt: skip
    worst = max(measured, key=lambda m: m[0], default=None)
    claimed = [r.claimed_s for r in recoveries if r.claimed_s is not None]
    states = Counter(v.state or "not ended" for v in verdicts)
    lost = sum(v.lost for v in verdicts)
    duplicated = sum(v.duplicated for v in verdicts)
    wrongly = sum(v.wrongly_done for v in verdicts)
    never = sum(r.never for r in recoveries)
    proxies: Counter[str] = Counter()
    for f in injected:
        proxies.update(f.injected)
    return {
        "seed": seed,
        "minutes": minutes,
        "workers": WORKERS,
        "lease_s": lease_s,
        "faults_forced": list(forced),
        "jobs": len(verdicts),
        "job_states": dict(states),
        "chunks": sum(a.chunks for a in submitter.asked),
        "frames": sum(len(a.frames) for a in submitter.asked),
        "submits_refused": submitter.refused,
        "faults_injected": len(injected),
        "faults_not_injected": injector_errors,
        "faults_by_kind": dict(Counter(f.fault.kind for f in injected)),
        "faults_by_variant": dict(Counter(f.fault.label for f in injected if f.fault.variant)),
        "proxy_injected": dict(proxies),
        "frames_lost": lost,
        "frames_duplicated": duplicated,
        "jobs_wrongly_done": wrongly,
        "recovery": {
            "definition": RECOVERY,
            "worst_s": round(worst[0], 1) if worst else None,
            "worst_fault": _fault_json(worst[1], None, t0) if worst else None,
            "median_s": round(statistics.median(m[0] for m in measured), 1) if measured else None,
            "measured": len(measured),
            "never": never,
            "worst_next_claim_s": round(max(claimed), 1) if claimed else None,
        },
        "faults": [_fault_json(f, r, t0) for f, r in zip(injected, recoveries, strict=True)],
        "jobs_detail": [v.to_json() for v in verdicts],
        "ok": lost == duplicated == wrongly == 0,
    }


def _fault_json(fault: Injected, found: Recovery | None, t0: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        "fault": fault.fault.label, "at_s": round(fault.start - t0, 1),
        "lasted_s": round(fault.end - fault.start, 1), "worker": fault.worker,
        "held": fault.hit, "injected": fault.injected, "note": fault.note,
    }  # fmt: skip
    if found is not None:
        out["recovery_s"] = None if found.seconds is None else round(found.seconds, 1)
        out["recovery_basis"] = found.basis
        if found.claimed_s is not None:
            out["next_claim_s"] = round(found.claimed_s, 1)
    return out


def _kinds(result: dict[str, Any]) -> str:
    by_kind, by_variant = result["faults_by_kind"], result["faults_by_variant"]
    parts = []
    for kind in soakplan.KINDS:
        if kind in by_kind:
            inner = [f"{label.split('(')[1][:-1]} {n}" for label, n in sorted(by_variant.items())
                     if label.startswith(f"{kind} (")]  # fmt: skip
            parts.append(f"{kind} {by_kind[kind]}" + (f" ({', '.join(inner)})" if inner else ""))
    return ", ".join(parts) or "none"


def table(result: dict[str, Any]) -> str:
    """The soak's figures, a Markdown table, and what its time to recover means."""
    states, rec, rebuilt = result["job_states"], result["recovery"], result["rebuild"]
    ended = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    if rec["worst_fault"]:
        worst = rec["worst_fault"]
        where = f" of {worst['worker']}" if worst["worker"] else ""
        recovered = (f"{rec['worst_s']:.1f} s: {worst['fault']}{where} at {worst['at_s']:.0f} s "
                     f"(median {rec['median_s']:.1f} s over {rec['measured']} faults)")  # fmt: skip
        if rec["worst_next_claim_s"] is not None:
            recovered += f"; worst to the next claim {rec['worst_next_claim_s']:.1f} s"
    else:
        recovered = "none measured"
    if rec["never"]:
        recovered += f"; {rec['never']} faults never recovered from"
    lines = [
        "| figure | value |",
        "|---|---|",
        f"| soak | seed {result['seed']}, {result['minutes']:g} min of faults "
        f"({result['soaked_s']:.0f} s), {result['workers']} workers, lease {result['lease_s']:g} s |",
        f"| jobs | {result['jobs']}: {ended}; {len(result['submits_refused'])} submits refused |",
        f"| chunks | {result['chunks']} (as planned at submit) |",
        f"| frames | {result['frames']} |",
        f"| faults injected | {result['faults_injected']}: {_kinds(result)} |",
        *[f"| faults not injected | {e} |" for e in result["faults_not_injected"]],
        f"| frames lost | {result['frames_lost']} |",
        f"| frames duplicated in any output | {result['frames_duplicated']} |",
        f"| jobs wrongly marked done | {result['jobs_wrongly_done']} |",
        f"| worst time to recover | {recovered} |",
        f"| ledger rebuild per 1,000 chunks | {rebuilt['s_per_1000_chunks']:.2f} s "
        f"({rebuilt['chunks']} chunks of {rebuilt['jobs']} jobs in {rebuilt['rebuild_s']:.2f} s, "
        f"{rebuilt['store_requests']} store requests) |",
        "",
        f"{RECOVERY}.",
    ]
    return "\n".join(lines)


def rows(result: dict[str, Any]) -> list[Row]:
    """The soak's lines in the bench's table (and docs/benchmarks.md)."""
    rec, rebuilt = result["recovery"], result["rebuild"]
    worst = rec["worst_fault"]
    return [
        Row(bench="soak",
            case=f"{result['minutes']:g} min of faults, seed {result['seed']}: {result['jobs']} "
            f"jobs, {result['chunks']} chunks, {result['frames']} frames",
            farm=f"frames lost {result['frames_lost']}, duplicated "
            f"{result['frames_duplicated']}, jobs wrongly done {result['jobs_wrongly_done']}",
            baseline="0, 0, 0", note=f"faults: {_kinds(result)}"),
        Row(bench="soak", case="worst time to recover",
            farm=f"{rec['worst_s']:.1f} s ({worst['fault']})" if worst else "none measured",
            baseline=f"lease {result['lease_s']:g} s",
            note=f"median {rec['median_s']} s over {rec['measured']} faults; {RECOVERY}"),
        Row(bench="soak", case="ledger rebuild per 1,000 chunks",
            farm=f"{rebuilt['s_per_1000_chunks']:.2f} s",
            baseline=f"{rebuilt['chunks']} chunks, {rebuilt['store_requests']} store requests",
            note=rebuilt["note"]),
    ]  # fmt: skip
