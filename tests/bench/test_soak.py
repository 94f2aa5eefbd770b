"""The soak (bench/soak.py) in a tiny run: a minute and a half of short jobs on a 3-worker farm
with one worker killed, one stopped past its lease, one burst of 503 SlowDown from the store and
one Redis loss (killed, its data wiped, `farm up` again), each forced. Every job ends whole, and
the results file says so and names each fault. Its times are printed, not asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import ROOT
from bench.soakplan import schedule

pytestmark = pytest.mark.e2e

FORCED = ("kill", "stop", "store", "redis")
SEED = 2
"""A seed whose draw makes the store fault a 503 burst and the Redis loss a restart."""


def _docs_tables() -> object:
    spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "docs" / "tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_soak_loses_no_frame_and_injects_every_fault_it_was_told_to(tmp_path: Path) -> None:
    """GIVEN a soak of 1.5 minutes with a kill, a stop, a store burst and a Redis loss forced
    WHEN it runs THEN it exits 0, every job it submitted ended done with every frame once and in
    order (0 lost, 0 duplicated, 0 wrongly done), each forced fault was injected once, and the
    results file holds its table's figures, which docs/tables.py turns into a table."""
    labels = {f.label for f in schedule(SEED, 90, 6, FORCED)}
    assert labels == {"kill", "stop", "store (503)", "redis (restart)"}

    done = subprocess.run(
        [sys.executable, "-m", "bench", "soak", "--minutes", "1.5", "--seed", str(SEED),
         "--faults", ",".join(FORCED), "--rebuild-chunks", "100", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=840, cwd=ROOT,
    )  # fmt: skip
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    (path,) = tmp_path.glob("bench-*.json")
    soak = json.loads(path.read_text())["soak"]
    assert soak["jobs"] >= 1 and soak["job_states"] == {"done": soak["jobs"]}, soak["jobs_detail"]
    assert soak["frames"] >= 4 * soak["jobs"]
    assert (soak["frames_lost"], soak["frames_duplicated"], soak["jobs_wrongly_done"]) == (0, 0, 0)
    assert soak["faults_by_kind"] == dict.fromkeys(FORCED, 1)
    faults = {f["fault"]: f for f in soak["faults"]}
    assert faults["store (503)"]["injected"]["503 SlowDown"] >= 1
    assert faults["kill"]["note"].startswith("replaced by soak")
    assert faults["redis (restart)"]["note"].startswith("ledger rebuilt")
    assert "time to recover: " in soak["recovery"]["definition"]
    rebuilt = soak["rebuild"]
    assert rebuilt["chunks"] == 100 and rebuilt["chunks_done"] == 50
    assert rebuilt["s_per_1000_chunks"] > 0 and rebuilt["store_requests"] > 0

    for line in ("| frames lost | 0 |", "| frames duplicated in any output | 0 |",
                 "| jobs wrongly marked done | 0 |", "| worst time to recover | ",
                 "| ledger rebuild per 1,000 chunks | "):  # fmt: skip
        assert line in done.stdout, done.stdout[-4000:]
    page = _docs_tables().benchmarks_tables(tmp_path)  # type: ignore[attr-defined]
    assert "| soak | worst time to recover |" in page
    assert "frames lost 0, duplicated 0, jobs wrongly done 0" in page
