"""The scale simulation's sweep: a 100,000-frame job on 1,000 spot GPUs at 0-20%/h reclaims,
fixed chunk sizes against `auto`, with makespan, waste and cost. `python -m bench simulate`.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from bench import simtail
from bench.common import Row
from bench.sim import Fleet, Outcome, Workload, simulate
from farm.core.chunking import AUTO
from farm.core.cost import price_of

STITCH_S = 10.0
"""The stitch after the last segment, now that every other segment's part was copied as it was
made (workers.phases.s3join.copy_early): about 1,000 ranged index reads, the first part (one segment,
sent), the upload's completion and a header ffprobe. Estimated, not measured on S3: on the local
SeaweedFS it takes 1.15 s for 100 segments (bench stitch); S3's tens of milliseconds a request
(8 reads at a time: about 4 s for 1,000) and the completion of 1,000 parts (seconds) make about
10 s. Before the early copies the simulation took 60 s: the whole join after the last render."""

WORKLOAD = Workload(
    frames=100_000,
    startup_s=20.0,
    frame_s=30.0,
    frame_cv=0.25,
    encode_startup_s=1.0,
    encode_frame_s=0.05,
    stitch_s=STITCH_S,
    task_latency_s=0.05,
    crash_p=0.002,
)
"""A 4K Cycles shot on A10G-class GPUs: 30 s a frame, 20 s to start Blender and load the scene."""
HEAVY = replace(WORKLOAD, startup_s=60.0, frame_s=10.0)
"""A scene that takes a minute to load and renders fast: where probing costs most."""
SIZES = (1, 5, 10, 25, 50, 100)
RATES = (0.0, 0.05, 0.10, 0.20)


def sweep(
    work: Workload, fleet: Fleet, rates: tuple[float, ...], sizes: tuple[int, ...], seed: int
) -> list[dict[str, Any]]:
    """Every policy at every rate; costs at spot (this run) and on-demand (the 0%/h run).
    Policies: each fixed size, `auto` (probe wave first) and `auto*` (sized at submit from an
    earlier job's measurement of the same scene)."""
    policies = {str(s): (s, False) for s in sizes} | {"auto": (AUTO, False), "auto*": (AUTO, True)}

    def one(policy: str, rate: float) -> Outcome:
        size, remembered = policies[policy]
        return simulate(work, replace(fleet, interruption_per_h=rate), size, seed, remembered)

    on_demand = {p: one(p, 0.0) for p in policies}
    rows = []
    for rate in rates:
        outcomes = {p: one(p, rate) if rate else on_demand[p] for p in policies}
        fixed = [outcomes[str(s)] for s in sizes if not outcomes[str(s)].failed]
        best = min(fixed, key=lambda o: o.makespan_s) if fixed else None
        for size, o in outcomes.items():
            rows.append(
                {
                    **asdict(o),
                    "rate_per_h": rate,
                    "ratio_to_ideal": round(o.ratio, 3),
                    "vs_best_fixed": round(o.makespan_s / best.makespan_s, 3) if best else None,
                    "best_fixed": best.policy if best else None,
                    "cost_spot": round(price_of(o.gpu_hours * 3600, fleet.spot_price_h), 2),
                    "cost_on_demand": round(
                        price_of(on_demand[size].gpu_hours * 3600, fleet.on_demand_price_h), 2
                    ),
                }
            )
    return rows


def text_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| reclaims/h | chunk | n | makespan s | /ideal | vs best fixed | GPU-h | lost GPU-h | "
        "start-up GPU-h | reclaims | spot $ | on-demand $ | most lost leases of a chunk |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        vs = f"{r['vs_best_fixed']:.3f}" if r["vs_best_fixed"] else ""
        fail = f" FAILED: {r['failed']}" if r["failed"] else ""
        lines.append(
            f"| {r['rate_per_h']:.0%} | {r['policy']} | {r['chunk_size']} | "
            f"{r['makespan_s']:.0f} | {r['ratio_to_ideal']:.3f} | {vs} | {r['gpu_hours']:.0f} | "
            f"{r['lost_h']:.2f} | {r['startup_h']:.1f} | {r['interruptions']} | "
            f"{r['cost_spot']:.0f} | {r['cost_on_demand']:.0f} | "
            f"{r['most_lost_leases']}{fail} |"
        )
    return "\n".join(lines)


def run(quick: bool, seed: int = 1) -> tuple[dict[str, Any], list[Row]]:
    scenarios = [
        ("A10G 4K shot", WORKLOAD, Fleet(gpus=1000), RATES, SIZES),
        ("heavy scene load", HEAVY, Fleet(gpus=1000), (0.0, 0.20), (10, 25, 50, 100)),
    ]
    if quick:
        small = replace(WORKLOAD, frames=2000)
        scenarios = [("small", small, Fleet(gpus=50), (0.0, 0.20), (5, 20))]
    result: dict[str, Any] = {"seed": seed, "scenarios": [], "table": ""}
    out = []
    tail_name, tail_work, tail_fleet = scenarios[0][0], scenarios[0][1], scenarios[0][2]
    tail, tail_rows = simtail.run(
        tail_name,
        tail_work,
        tail_fleet,
        simtail.RATES if not quick else (0.0, 0.20),
        simtail.SEEDS if not quick else (seed,),
    )
    result["no_idle_tail"] = tail
    result["table"] += f"\nno idle tail, {tail_name}\n{tail['table']}\n"
    out += tail_rows
    for name, work, fleet, rates, sizes in scenarios:
        rows = sweep(work, fleet, rates, sizes, seed)
        result["scenarios"].append(
            {"name": name, "workload": asdict(work), "fleet": asdict(fleet), "rows": rows}
        )
        result["table"] += (
            f"\n{name}: S={work.startup_s:.0f} s, F={work.frame_s:.0f} s\n{text_table(rows)}\n"
        )
        for rate in rates:
            auto, known = (
                next(r for r in rows if r["rate_per_h"] == rate and r["policy"] == p)
                for p in ("auto", "auto*")
            )
            out.append(
                Row(
                    bench="simulate",
                    case=f"{name} (S={work.startup_s:.0f} s, F={work.frame_s:.0f} s): "
                    f"{work.frames:,} frames, {fleet.gpus:,} GPUs, {rate:.0%}/h reclaims",
                    farm=f"auto n={auto['chunk_size']}: {auto['makespan_s']:.0f} s "
                    f"({auto['ratio_to_ideal']:.2f} x ideal)",
                    baseline=f"best fixed n={auto['best_fixed']}",
                    ratio=auto["vs_best_fixed"],
                    note=f"auto/best; auto* (remembered) n={known['chunk_size']}: "
                    f"{known['vs_best_fixed']:.3f}; lost {auto['lost_h']:.1f} GPU-h, start-up "
                    f"{auto['startup_h']:.0f} GPU-h; ${auto['cost_spot']:.0f} spot vs "
                    f"${auto['cost_on_demand']:.0f} on-demand",
                )
            )
    return result, out
