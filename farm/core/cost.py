"""What GPU time costs (pure): the price table, the job's cost from its ledger record, the
expected cost to finish, the budget rule, and the estimate of a job before it runs.

Money is recorded per attempt at the price of the instance that ran it (the ledger keeps GPU-seconds
and dollars per instance type and lifecycle); the same sizing model as `--chunk-size auto`
(farm.core.chunking) plans the estimate, and the simulator prices its runs with `price_of`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from farm.core import chunking
from farm.core.errors import ConfigError
from farm.core.state import ENDED

SHIPPED_PRICES = Path(__file__).with_name("prices.json")


class Lifecycle(StrEnum):
    SPOT = "spot"
    """An EC2 spot instance (instance metadata says `spot`)."""
    ON_DEMAND = "on-demand"
    """An EC2 on-demand instance."""
    LOCAL = "local"
    """A machine of the user's own (a local farm); priced as its chosen instance type on demand,
    the price a person would pay to have the same work done without waiting for spot."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    on_demand_h: float
    spot_h: float

    def per_h(self, lifecycle: Lifecycle) -> float:
        return self.spot_h if lifecycle is Lifecycle.SPOT else self.on_demand_h


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceTable:
    as_of: str
    source: str
    currency: str
    regions: dict[str, dict[str, Price]]

    def price(self, region: str, instance_type: str) -> Price:
        table = self.regions.get(region)
        if table is None:
            raise ConfigError(
                f"no prices for region {region!r} (the table of {self.as_of} has "
                f"{', '.join(sorted(self.regions))}); set FARM_REGION or FARM_PRICE_FILE"
            )
        if instance_type not in table:
            raise ConfigError(
                f"no price for {instance_type} in {region} (the table of {self.as_of}); "
                "add it to a price file and set FARM_PRICE_FILE"
            )
        return table[instance_type]


def parse_prices(data: dict[str, Any]) -> PriceTable:
    regions = {
        region: {
            kind: Price(on_demand_h=float(p["on_demand_h"]), spot_h=float(p["spot_h"]))
            for kind, p in types.items()
        }
        for region, types in data["regions"].items()
    }
    return PriceTable(
        as_of=str(data.get("as_of", "?")),
        source=str(data.get("source", "")),
        currency=str(data.get("currency", "USD")),
        regions=regions,
    )


def load_prices(path: str | Path = "") -> PriceTable:
    """The price file given (settings.price_file), else the table shipped with farm."""
    target = Path(path) if path else SHIPPED_PRICES
    try:
        return parse_prices(json.loads(target.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{target}: cannot read the price table ({exc})") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Instance:
    """Where an attempt runs: what it costs per second is recorded with each claim."""

    instance_type: str
    lifecycle: Lifecycle
    region: str

    def claim_fields(self, table: PriceTable) -> dict[str, str]:
        per_s = table.price(self.region, self.instance_type).per_h(self.lifecycle) / 3600
        return {
            "instance_type": self.instance_type,
            "lifecycle": str(self.lifecycle),
            "price_per_s": repr(per_s),
        }


def price_of(gpu_s: float, price_h: float) -> float:
    """Dollars for `gpu_s` GPU-seconds at `price_h` an hour."""
    return gpu_s / 3600 * price_h


# ── a job's cost, from its ledger record ──────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True, kw_only=True)
class JobCost:
    spent: float
    """Every attempt so far, useful or not."""
    wasted: float
    """Attempts that produced nothing kept: failed, interrupted, lost, cancelled."""
    startup: float
    """Blender start-up and scene load inside useful attempts (paid for, no frame made)."""
    gpu_s: float
    wasted_gpu_s: float
    attempts: int
    wasted_attempts: int
    by_instance: dict[str, float]
    """GPU-seconds per `instance_type lifecycle`."""
    run_per_s: float = 0.0
    run_base: float = 0.0
    """The attempts running now: their dollars a second together, and the sum of each one's
    dollars a second times its claim time (the ledger's chunk_move.lua), metered only when they end."""

    def running(self, now: float) -> float:
        """Dollars the running attempts have spent so far."""
        if self.run_per_s < 1e-12:  # none runs (what HINCRBYFLOAT's sums leave behind)
            return 0.0
        return max(now * self.run_per_s - self.run_base, 0.0)


def job_cost(raw: dict[str, str]) -> JobCost:
    """The ledger's cost hash (its chunk_move.lua meters every attempt into it) as a value."""

    def num(name: str) -> float:
        return float(raw.get(name) or 0)

    by_instance = {
        key.split(":", 1)[1].replace(":", " "): float(v)
        for key, v in raw.items()
        if key.startswith("gpu_s:")
    }
    return JobCost(
        spent=num("cost"),
        wasted=num("wasted_cost"),
        startup=num("startup_cost"),
        gpu_s=num("gpu_s"),
        wasted_gpu_s=num("wasted_gpu_s"),
        attempts=int(num("attempts")),
        wasted_attempts=int(num("wasted_attempts")),
        by_instance=by_instance,
        run_per_s=num("run_per_s"),
        run_base=num("run_base"),
    )


def expected_to_finish(
    *, spent: float, frames_done: int, frames_total: int, prior_per_frame: float = 0.0
) -> float:
    """Dollars still to spend: the frames left at what each frame has cost so far, waste
    included (a job that loses work keeps losing it); before any frame, the submit-time
    estimate's cost per frame (0 when there was none)."""
    left = max(frames_total - frames_done, 0)
    per_frame = spent / frames_done if frames_done > 0 else prior_per_frame
    return left * per_frame


def over_budget(*, spent: float, expected_rest: float, max_cost: float) -> bool:
    """The budget rule: no new chunk starts once spent plus expected would pass the budget."""
    return max_cost > 0 and spent + expected_rest > max_cost + 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class Spend:
    """A job's money so far and to come, and its budget."""

    cost: JobCost
    frames_done: int
    frames_total: int
    expected_rest: float
    max_cost: float
    running: float = 0.0
    """Spent by the attempts running now (JobCost.running): their frames count as done as
    each is stored, so the money must count as it goes too, or the cost a frame and the budget
    would read low until the attempts end."""

    @property
    def spent(self) -> float:
        """Every attempt so far, the running ones to this moment."""
        return self.cost.spent + self.running

    @property
    def over_budget(self) -> bool:
        return over_budget(
            spent=self.spent, expected_rest=self.expected_rest, max_cost=self.max_cost
        )

    def budget_reason(self, job_id: str) -> str:
        return (
            f"budget: spent {money(self.spent)} + expected {money(self.expected_rest)} to "
            f"finish would pass the budget of {money(self.max_cost)}; `farm resume {job_id} "
            "--max-cost N` continues"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "spent": round(self.spent, 6),
            "running": round(self.running, 6),
            "wasted": round(self.cost.wasted, 6),
            "startup": round(self.cost.startup, 6),
            "expected_to_finish": round(self.expected_rest, 6),
            "expected_total": round(self.spent + self.expected_rest, 6),
            "max_cost": self.max_cost,
            "gpu_s": round(self.cost.gpu_s, 3),
            "wasted_gpu_s": round(self.cost.wasted_gpu_s, 3),
            "attempts": self.cost.attempts,
            "wasted_attempts": self.cost.wasted_attempts,
            "gpu_s_by_instance": {k: round(v, 3) for k, v in self.cost.by_instance.items()},
        }


def spend_of(
    job: dict[str, str], cost: JobCost, frames_done: int, now: float | None = None
) -> Spend:
    """`job`: the ledger's job hash (frames_total, max_cost, est_cost_per_frame, state)."""
    total = int(job.get("frames_total", 0) or 0)
    # An ended job's figure is what was metered (a cancel meters its running attempts then).
    running = (
        0.0 if job.get("state") in ENDED else cost.running(time.time() if now is None else now)
    )
    prior = float(job.get("est_cost_per_frame") or 0)
    if cost.attempts or cost.spent:  # an attempt has been metered
        rest = expected_to_finish(
            spent=cost.spent + running, frames_done=frames_done, frames_total=total,
            prior_per_frame=prior,
        )  # fmt: skip
    else:
        # No attempt has ended: what the first ones have spent is mostly start-up and frames
        # under way, a pace many times a frame's (a budget would pause a job well within it).
        # The submit-time estimate's pace holds until one ends.
        rest = max(total - frames_done, 0) * prior
    if job.get("state") in ENDED:
        rest = 0.0
    return Spend(
        cost=cost,
        frames_done=frames_done,
        frames_total=total,
        expected_rest=rest,
        max_cost=float(job.get("max_cost") or 0),
        running=running,
    )


# ── before the job runs ───────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    frames: int
    chunks: int
    chunk_size: int
    gpu_s_spot: float
    """Busy GPU-seconds on spot, work lost to reclaims included."""
    gpu_s_on_demand: float
    makespan_s: float
    """Expected time from the first chunk to the last (farm.core.chunking's makespan model)."""
    cost_spot: float
    cost_on_demand: float
    reason: str

    @property
    def cost_per_frame_on_demand(self) -> float:
        return self.cost_on_demand / max(self.frames, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "chunks": self.chunks,
            "chunk_size": self.chunk_size,
            "gpu_hours_spot": round(self.gpu_s_spot / 3600, 4),
            "gpu_hours_on_demand": round(self.gpu_s_on_demand / 3600, 4),
            "time_s": round(self.makespan_s, 1),
            "cost_spot": round(self.cost_spot, 4),
            "cost_on_demand": round(self.cost_on_demand, 4),
            "reason": self.reason,
        }


def reclaim_loss(m: chunking.Measurement, pool: chunking.Pool) -> float:
    """Share of spot capacity lost to reclaims, as farm.core.chunking's makespan model counts it."""
    lam = pool.interruption_per_h / 3600.0
    return min(lam * (pool.boot_s + m.startup_s + m.frame_s / 2), 0.9)


def estimate(
    *, frames: int, chunk_size: int, m: chunking.Measurement, pool: chunking.Pool, price: Price
) -> Estimate:
    """The plan `--chunk-size` would make (AUTO: chunking.choose_chunk_size, as a job sized at
    submit from a measurement), its busy GPU time (F per frame, and S once per worker that
    renders where Blenders stay warm between a job's chunks, else once per chunk) and its cost."""
    if chunk_size == chunking.AUTO:
        choice = chunking.choose_chunk_size(frames=frames, m=m, pool=pool)
        n, makespan, reason = choice.chunk_size, choice.expected_makespan_s, choice.reason
    else:
        n = chunk_size
        makespan = chunking.expected_makespan_s(
            n, frames=frames, m=m, pool=pool, frame_cv=chunking.FRAME_CV
        )
        reason = f"fixed: {n} frames per chunk"
    chunks = math.ceil(frames / n)
    starts = min(chunks, max(pool.workers, 1)) if pool.warm_blender else chunks
    busy = starts * m.startup_s + frames * m.frame_s
    spot = busy / (1 - reclaim_loss(m, pool))
    return Estimate(
        frames=frames,
        chunks=chunks,
        chunk_size=n,
        gpu_s_spot=spot,
        gpu_s_on_demand=busy,
        makespan_s=makespan,
        cost_spot=price_of(spot, price.spot_h),
        cost_on_demand=price_of(busy, price.on_demand_h),
        reason=reason,
    )


def money(value: float, currency: str = "USD") -> str:
    """$0.0042 for small sums (a local test farm spends fractions of a cent), $12.35 otherwise."""
    sign = "$" if currency == "USD" else currency + " "
    return f"{sign}{value:.4f}" if abs(value) < 1 else f"{sign}{value:,.2f}"
