"""No idle tail in the scale simulation: `auto` and `auto*` with and without splitting (farm.core.split)
at 0, 5 and 20%/h, means over seeds, makespan from when the fleet is up against the ideal, and
where the time beyond the ideal went (bench.simtime).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, fields, replace
from typing import Any

from bench.common import Row
from bench.sim import Fleet, Workload, simulate
from bench.simspec import Breakdown
from farm.core.chunking import AUTO

RATES = (0.0, 0.05, 0.20)
SEEDS = (1, 2, 3)
PARTS = {
    "startup_s": "Blender start-up",
    "encode_s": "encodes",
    "lost_s": "frames lost",
    "replacement_boot_s": "replacement boot",
    "probe_idle_s": "probe wait",
    "draw_s": "frame draw",
    "idle_s": "idle (tail)",
    "after_last_render_s": "last encode + stitch",
}
"""Breakdown fields, as the table names them."""


def sweep(
    work: Workload, fleet: Fleet, rates: tuple[float, ...], seeds: tuple[int, ...]
) -> list[dict[str, Any]]:
    """One row per rate, policy (`auto`, `auto*`), split or not, and seed."""
    rows = []
    for rate in rates:
        for remembered in (False, True):
            for splits in (False, True):
                for seed in seeds:
                    pool = replace(fleet, interruption_per_h=rate)
                    o = simulate(work, pool, AUTO, seed, remembered, splits)
                    rows.append(
                        {
                            **asdict(o),
                            "seed": seed,
                            "rate_per_h": rate,
                            "split": splits,
                            "ratio_to_ideal": o.ratio,
                            "ratio_from_up": o.ratio_up,
                        }
                    )
    return rows


def means(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of each rate, policy and split averaged over their seeds."""
    groups: dict[tuple[float, str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["rate_per_h"], r["policy"], r["split"]), []).append(r)
    out = []
    for (rate, policy, split), group in groups.items():

        def mean(key: str, group: list[dict[str, Any]] = group) -> float:
            return statistics.fmean(r[key] for r in group)

        parts = {f.name: statistics.fmean(r["breakdown"][f.name] for r in group)
                 for f in fields(Breakdown)}  # fmt: skip
        out.append(
            {
                "rate_per_h": rate,
                "policy": policy,
                "split": split,
                "seeds": [r["seed"] for r in group],
                "chunk_size": group[0]["chunk_size"],
                "chunks": mean("chunks"),
                "splits": mean("splits"),
                "makespan_s": mean("makespan_s"),
                "fleet_up_s": mean("fleet_up_s"),
                "ratio_to_ideal": round(mean("ratio_to_ideal"), 3),
                "ratio_from_up": round(mean("ratio_from_up"), 3),
                "breakdown": parts,
                "failed": "; ".join(r["failed"] for r in group if r["failed"]),
            }
        )
    return out


def table(rows: list[dict[str, Any]], ideal_s: float) -> str:
    """Means over seeds, then where the time beyond the ideal went (seconds, % of the ideal)."""
    lines = [
        "| reclaims/h | chunk | n | split | chunks | splits | makespan s | fleet up s | "
        "/ideal | /ideal from fleet up |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fail = f" FAILED: {r['failed']}" if r["failed"] else ""
        lines.append(
            f"| {r['rate_per_h']:.0%} | {r['policy']} | {r['chunk_size']} | "
            f"{'yes' if r['split'] else 'no'} | {r['chunks']:.0f} | {r['splits']:.0f} | "
            f"{r['makespan_s']:.0f} | {r['fleet_up_s']:.0f} | {r['ratio_to_ideal']:.3f} | "
            f"{r['ratio_from_up']:.3f}{fail} |"
        )
    lines += [
        "",
        "where the time beyond the ideal went, from fleet up (s per GPU; % of the ideal "
        f"{ideal_s:.0f} s): GPU time to the last render over the GPUs, then what follows it",
        "",
        "| reclaims/h | chunk | split | " + " | ".join(PARTS.values()) + " | total |",
        "|---|---|---|" + "---|" * (len(PARTS) + 1),
    ]
    for r in rows:
        b = r["breakdown"]
        cells = [f"{b[k]:.0f} ({b[k] / ideal_s:.1%})" for k in PARTS]
        total = sum(b.values())
        lines.append(
            f"| {r['rate_per_h']:.0%} | {r['policy']} | {'yes' if r['split'] else 'no'} | "
            + " | ".join(cells)
            + f" | {total:.0f} ({total / ideal_s:.1%}) |"
        )
    return "\n".join(lines)


def encodes_after(
    work: Workload, fleet: Fleet, rate: float, seeds: tuple[int, ...], remembered: bool
) -> float:
    """Makespan from fleet up over the ideal, split, with each encode after its render on the
    render GPU (no NVENC lane: Fleet.encode_alongside off), mean over `seeds`."""
    pool = replace(fleet, interruption_per_h=rate, encode_alongside=False)
    return statistics.fmean(
        simulate(work, pool, AUTO, seed, remembered, True).ratio_up for seed in seeds
    )


def table_rows(name: str, work: Workload, fleet: Fleet, rows: list[dict[str, Any]]) -> list[Row]:
    """One row per policy: makespan/ideal from fleet up, split against not, per rate."""
    out = []
    rates = sorted({r["rate_per_h"] for r in rows})
    seeds = rows[0]["seeds"]
    for policy in ("auto", "auto*"):

        def pick(rate: float, split: bool, policy: str = policy) -> dict[str, Any]:
            return next(
                r
                for r in rows
                if r["rate_per_h"] == rate and r["policy"] == policy and r["split"] is split
            )

        on = [pick(rate, True) for rate in rates]
        off = [pick(rate, False) for rate in rates]
        at = on[1] if len(on) > 1 else on[0]
        b = at["breakdown"]
        after = encodes_after(work, fleet, at["rate_per_h"], tuple(seeds), policy == "auto*")
        out.append(
            Row(
                bench="simulate",
                case=f"no idle tail, {name}: {work.frames:,} frames, {fleet.gpus:,} GPUs, "
                f"{work.frame_cv:.0%} frame-time spread, "
                + " / ".join(f"{r:.0%}" for r in rates)
                + f"/h reclaims; makespan from fleet up over ideal, mean of {len(seeds)} seeds",
                farm=f"{policy} n={on[0]['chunk_size']} split: "
                + " / ".join(f"{r['ratio_from_up']:.3f}" for r in on),
                baseline="no split: " + " / ".join(f"{r['ratio_from_up']:.3f}" for r in off),
                ratio=at["ratio_from_up"],
                note=f"ratio: split, at {at['rate_per_h']:.0%}/h, target 1.03; beyond the ideal "
                + ", ".join(f"{PARTS[k]} {b[k]:.0f} s" for k in PARTS if abs(b[k]) >= 0.5)
                + f"; encodes after renders, not beside (no NVENC lane): {after:.3f}"
                + "; splits "
                + " / ".join(f"{r['splits']:.0f}" for r in on)
                + "; from t=0 (boot included): "
                + " / ".join(f"{r['ratio_to_ideal']:.3f}" for r in on),
            )
        )
    return out


def run(
    name: str, work: Workload, fleet: Fleet, rates: tuple[float, ...], seeds: tuple[int, ...]
) -> tuple[dict[str, Any], list[Row]]:
    runs = sweep(work, fleet, rates, seeds)
    rows = means(runs)
    ideal_s = work.frames * work.frame_s / fleet.gpus
    result = {"name": name, "runs": runs, "means": rows, "table": table(rows, ideal_s)}
    return result, table_rows(name, work, fleet, rows)
