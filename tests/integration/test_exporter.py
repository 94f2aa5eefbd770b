"""The Prometheus exporter reads the ledger on a real Redis; the dashboard asks only for what it
serves; the CloudWatch publisher's backlog is the same number."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from farm.control import census
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState
from farm.ledger import Ledger
from farm.web.exporter import METRIC_NAMES, registry_for, scrape
from tests.promql import DASHBOARD, metric_names


def _job(ledger: Ledger, job_id: str, chunks: int) -> None:
    spec = build_render_spec(
        source_name="s.blend", frames=f"1-{chunks * 2}", chunk_size=2, resolution="320x180",
        fps=24, samples=4, codec="h264",
    )  # fmt: skip
    ledger.create_job(job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")


def _samples(ledger: Ledger) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = scrape(registry_for(ledger)).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _busy_farm(ledger: Ledger) -> None:
    """Job j1: 4 chunks: one rendering, one rendered (waits for encode), one done, one queued;
    one render worker and one encode worker alive."""
    _job(ledger, "j1", 4)
    claim = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30, worker="w1")
    assert claim.moved
    c1 = ledger.move_chunk("j1", 1, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk("j1", 1, ChunkState.RENDERED, token=c1.token, render_s=12.5, frame_s=6.0,
                      frames_rendered=2)  # fmt: skip
    c2 = ledger.move_chunk("j1", 2, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk("j1", 2, ChunkState.RENDERED, token=c2.token, render_s=11.0)
    e2 = ledger.move_chunk("j1", 2, ChunkState.ENCODING, mode="claim", lease_s=30)
    ledger.move_chunk("j1", 2, ChunkState.DONE, token=e2.token, encode_s=3.0, segment_bytes=1000,
                      encoder="libx264", ssim=0.985, psnr_db=41.5, vmaf=93.5)  # fmt: skip
    ledger.record_frame("j1", 3, 500, "ab")
    ledger.record_frame("j1", 4, 700, "cd")
    ledger.heartbeat("w1", {"queues": ["render", "stitch"], "cycles_device": "OPTIX"})
    ledger.heartbeat("w2", {"queues": ["encode"], "cycles_device": "CPU", "nvenc": True})


def test_chunks_are_counted_by_the_queue_they_wait_for_and_state(ledger: Ledger) -> None:
    _busy_farm(ledger)
    samples = _samples(ledger)
    assert samples[("farm_chunks", (("queue", "render"), ("state", "rendering")))] == 1
    assert samples[("farm_chunks", (("queue", "render"), ("state", "queued")))] == 1
    assert samples[("farm_chunks", (("queue", "encode"), ("state", "rendered")))] == 1
    assert samples[("farm_chunks", (("queue", "none"), ("state", "done")))] == 1
    assert samples[("farm_jobs", (("state", "running"),))] == 1
    assert samples[("farm_up", ())] == 1


def test_backlog_per_worker_counts_queued_and_running_chunks(ledger: Ledger) -> None:
    _busy_farm(ledger)
    samples = _samples(ledger)
    # render: 1 queued + 1 rendering on 1 worker; encode: 1 waiting on 1 worker.
    assert samples[("farm_backlog_per_worker", (("queue", "render"),))] == 2.0
    assert samples[("farm_backlog_per_worker", (("queue", "encode"),))] == 1.0
    assert samples[("farm_queue_backlog_chunks", (("kind", "running"), ("queue", "render")))] == 1
    assert census.take(ledger).backlog_per_worker() == {"render": 2.0, "encode": 1.0, "stitch": 0.0}


def test_work_histograms_and_bytes_come_from_chunk_fields(ledger: Ledger) -> None:
    _busy_farm(ledger)
    samples = _samples(ledger)
    assert samples[("farm_chunk_duration_seconds_count", (("phase", "render"),))] == 2
    assert samples[("farm_chunk_duration_seconds_sum", (("phase", "render"),))] == 23.5
    assert (
        samples[("farm_chunk_duration_seconds_bucket", (("le", "15.0"), ("phase", "render")))] == 2
    )
    assert samples[("farm_frame_time_seconds_count", (("engine", "blender"),))] == 2
    assert samples[("farm_store_bytes_written_total", (("what", "frames"),))] == 1200
    assert samples[("farm_store_bytes_written_total", (("what", "segments"),))] == 1000
    # The cost meter (farm.core.cost) records each attempt's wall time; no price here, so $0.
    gpu_s = sum(v for (name, _), v in samples.items() if name == "farm_gpu_seconds_total")
    assert 0 < gpu_s < 30
    assert samples[("farm_cost_usd_total", ())] == 0.0
    assert samples[("farm_chunk_attempts_total", ())] == 3
    worker = (("device", "OPTIX"), ("draining", "false"), ("nvenc", "false"), ("queue", "render"))
    assert samples[("farm_workers", worker)] == 1


def test_segment_scores_are_histograms_by_encoder(ledger: Ledger) -> None:
    _busy_farm(ledger)
    samples = _samples(ledger)
    x264 = (("encoder", "libx264"),)
    assert samples[("farm_segment_ssim_count", x264)] == 1
    assert samples[("farm_segment_ssim_bucket", (("encoder", "libx264"), ("le", "0.98")))] == 0
    assert samples[("farm_segment_ssim_bucket", (("encoder", "libx264"), ("le", "0.99")))] == 1
    assert samples[("farm_segment_psnr_db_sum", x264)] == 41.5
    assert samples[("farm_segment_vmaf_bucket", (("encoder", "libx264"), ("le", "95.0")))] == 1
    assert samples[("farm_segment_vmaf_sum", x264)] == 93.5


def test_a_failed_attempt_counts_as_a_failure(ledger: Ledger) -> None:
    _job(ledger, "j2", 1)
    claim = ledger.move_chunk("j2", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk("j2", 0, ChunkState.QUEUED, token=claim.token, mode="fail", max_failures=3,
                      error="boom")  # fmt: skip
    assert _samples(ledger)[("farm_chunk_failures_total", ())] == 1


def test_an_unreachable_ledger_scrapes_as_down() -> None:
    dead = Ledger.from_url("redis://127.0.0.1:1/0")
    assert _samples(dead) == {("farm_up", ()): 0.0}


def _served_names(ledger: Ledger) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(scrape(registry_for(ledger)).decode()):
        names |= {s.name for s in family.samples}
    return names


def test_every_dashboard_query_names_a_metric_the_exporter_serves(ledger: Ledger) -> None:
    _busy_farm(ledger)
    served = _served_names(ledger)
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= served, f"{expr}: {sorted(names - served)} not served"
    # The exporter's declared families are all there too (KEDA and the tests rely on the list).
    assert {n.removesuffix("_total") for n in METRIC_NAMES} <= {
        n.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        for n in served
    }


def test_the_promql_name_extractor_skips_functions_and_labels() -> None:
    expr = 'histogram_quantile(0.5, sum by (le, phase) (rate(farm_x_bucket{a="b"}[5m]))) / farm_y'
    assert metric_names(expr) == {"farm_x_bucket", "farm_y"}


def test_the_dashboard_is_one_grafana_dashboard_with_distinct_panels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs)
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("queue depth", "throughput", "failures", "spend", "workers"):
        assert topic in titles, topic


def test_each_chunks_mean_frame_time_counts_once_per_frame_it_rendered(ledger: Ledger) -> None:
    """GIVEN a chunk of 100 frames at 2 s and one of 3 frames at 20 s WHEN scraped THEN the
    histogram counts 103 frames, 100 of them at or under 5 s, and their 260 s: from one entry
    a chunk (it held one float a frame: a 100,000-frame job's list on every scrape)."""
    _job(ledger, "frames", 2)
    for index, (frame_s, frames) in enumerate([(2.0, 100), (20.0, 3)]):
        ledger.r.hset(f"farm:chunk:frames:{index}",
                      mapping={"frame_s": frame_s, "frames_rendered": frames})  # fmt: skip
    taken = census.take(ledger)
    assert sorted(taken.frame_times_s) == [(2.0, 100), (20.0, 3)]
    samples = _samples(ledger)
    engine = (("engine", "blender"),)
    assert samples[("farm_frame_time_seconds_count", engine)] == 103
    assert samples[("farm_frame_time_seconds_sum", engine)] == 260
    assert (
        samples[("farm_frame_time_seconds_bucket", (("engine", "blender"), ("le", "5.0")))] == 100
    )
    assert samples[("farm_frame_time_seconds_bucket", (("engine", "blender"), ("le", "1.0")))] == 0
