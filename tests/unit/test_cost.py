"""The cost model (pure): prices, a job's cost from its ledger record, the budget rule, estimates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.core import chunking, cost
from farm.core.errors import ConfigError


def test_shipped_price_table_is_dated_and_covers_the_terraform_gpu_types() -> None:
    table = cost.load_prices()
    assert table.as_of and table.source
    for kind in ("g4dn.xlarge", "g5.xlarge", "g6.xlarge", "g6e.xlarge", "p4d.24xlarge"):
        price = table.price("us-east-1", kind)
        assert 0 < price.spot_h < price.on_demand_h


def test_a_price_file_replaces_the_shipped_table(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"as_of": "2026-01-01", "regions": {
        "mars-1": {"x1": {"on_demand_h": 2.0, "spot_h": 1.0}}}}))  # fmt: skip
    table = cost.load_prices(path)
    assert table.price("mars-1", "x1").per_h(cost.Lifecycle.SPOT) == 1.0


def test_an_unknown_instance_type_says_how_to_price_it() -> None:
    with pytest.raises(ConfigError, match="FARM_PRICE_FILE"):
        cost.load_prices().price("us-east-1", "z9.mega")


def test_local_work_is_priced_on_demand_and_spot_at_spot() -> None:
    price = cost.Price(on_demand_h=3.6, spot_h=1.8)
    assert price.per_h(cost.Lifecycle.LOCAL) == 3.6
    assert price.per_h(cost.Lifecycle.SPOT) == 1.8
    assert price.per_h(cost.Lifecycle.ON_DEMAND) == 3.6


def test_claim_fields_carry_the_price_per_second() -> None:
    table = cost.PriceTable(as_of="d", source="s", currency="USD",
                            regions={"r": {"t": cost.Price(on_demand_h=3.6, spot_h=1.8)}})  # fmt: skip
    fields = cost.Instance(
        instance_type="t", lifecycle=cost.Lifecycle.SPOT, region="r"
    ).claim_fields(table)
    assert fields == {"instance_type": "t", "lifecycle": "spot", "price_per_s": "0.0005"}


def test_job_cost_reads_the_ledger_hash() -> None:
    raw = {"cost": "1.5", "wasted_cost": "0.5", "gpu_s": "100", "wasted_gpu_s": "30",
           "attempts": "4", "wasted_attempts": "1", "gpu_s:g5.xlarge:spot": "100",
           "startup_cost": "0.1"}  # fmt: skip
    c = cost.job_cost(raw)
    assert (c.spent, c.wasted, c.startup, c.attempts, c.wasted_attempts) == (1.5, 0.5, 0.1, 4, 1)
    assert c.by_instance == {"g5.xlarge spot": 100.0}


def test_expected_to_finish_uses_what_each_frame_cost_so_far() -> None:
    assert cost.expected_to_finish(spent=10.0, frames_done=10, frames_total=40) == 30.0


def test_expected_to_finish_before_any_frame_uses_the_prior() -> None:
    assert (
        cost.expected_to_finish(spent=0.0, frames_done=0, frames_total=40, prior_per_frame=0.5)
        == 20.0
    )


def test_budget_rule_counts_spent_plus_expected() -> None:
    assert not cost.over_budget(spent=4.0, expected_rest=6.0, max_cost=10.0)
    assert cost.over_budget(spent=4.0, expected_rest=6.5, max_cost=10.0)
    assert not cost.over_budget(spent=400.0, expected_rest=600.0, max_cost=0.0)


def test_spend_of_a_done_job_expects_nothing_more() -> None:
    c = cost.job_cost({"cost": "2"})
    spend = cost.spend_of({"state": "done", "frames_total": "10"}, c, frames_done=5)
    assert spend.expected_rest == 0.0


def test_spend_gives_the_budget_reason() -> None:
    c = cost.job_cost({"cost": "2"})
    spend = cost.spend_of({"state": "running", "frames_total": "10", "max_cost": "3"}, c, 5)
    assert spend.over_budget
    assert "would pass the budget of $3.00" in spend.budget_reason("j1")
    assert "`farm resume j1 --max-cost N` continues" in spend.budget_reason("j1")


def test_estimate_auto_uses_the_chunk_size_rule() -> None:
    m = chunking.Measurement(startup_s=20.0, frame_s=30.0)
    pool = chunking.Pool(workers=10, interruption_per_h=0.0)
    est = cost.estimate(frames=1000, chunk_size=chunking.AUTO, m=m, pool=pool,
                        price=cost.Price(on_demand_h=1.0, spot_h=0.4))  # fmt: skip
    choice = chunking.choose_chunk_size(frames=1000, m=m, pool=pool)
    assert est.chunk_size == choice.chunk_size
    assert est.makespan_s == choice.expected_makespan_s
    busy = min(est.chunks, 10) * 20.0 + 1000 * 30.0  # each worker starts Blender once
    assert est.gpu_s_on_demand == pytest.approx(busy)
    assert est.cost_on_demand == pytest.approx(busy / 3600)
    assert est.cost_spot == pytest.approx(busy / 3600 * 0.4)  # no reclaims: no lost work


def test_an_estimate_charges_a_start_up_per_chunk_only_where_blenders_do_not_stay_warm() -> None:
    m = chunking.Measurement(startup_s=20.0, frame_s=30.0)
    price = cost.Price(on_demand_h=1.0, spot_h=1.0)
    for warm, starts in ((True, 10), (False, 100)):
        pool = chunking.Pool(workers=10, interruption_per_h=0.0, warm_blender=warm)
        est = cost.estimate(frames=1000, chunk_size=10, m=m, pool=pool, price=price)
        assert est.chunks == 100
        assert est.gpu_s_on_demand == pytest.approx(starts * 20.0 + 1000 * 30.0)


def test_estimate_on_spot_adds_work_lost_to_reclaims() -> None:
    m = chunking.Measurement(startup_s=20.0, frame_s=30.0)
    pool = chunking.Pool(workers=10, interruption_per_h=0.2)
    est = cost.estimate(frames=1000, chunk_size=10, m=m, pool=pool,
                        price=cost.Price(on_demand_h=1.0, spot_h=1.0))  # fmt: skip
    assert est.chunks == 100
    assert est.gpu_s_spot > est.gpu_s_on_demand


def test_money_shows_fractions_of_a_cent_for_small_sums() -> None:
    assert cost.money(0.00421) == "$0.0042"
    assert cost.money(1234.5) == "$1,234.50"
