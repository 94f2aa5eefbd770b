"""A done chunk's segment gone from the store before the stitch (a lifecycle rule, a deletion):
the stitch fails the job saying so, and `farm retry` makes that chunk again from its stored
frames; the video then has every frame."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.core import keys
from tests.conftest import DEMO, LocalFarm
from tests.e2e.farmtools import frame_count, submit, wait_final, wait_for

pytestmark = pytest.mark.e2e


def test_a_retry_makes_a_chunk_whose_segment_is_gone_again(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    job_id = submit(local_farm, DEMO, "--frames", "1-12", "--chunk-size", "4", "--samples", "4")
    ledger, store = local_farm.ledger(), local_farm.store()
    wait_for("chunk 0 done", lambda: ledger.chunk(job_id, 0).get("state") == "done", 300,
             local_farm)  # fmt: skip
    # Held while the segment goes: the stitch must meet its absence, not race it.
    local_farm.farm("pause", job_id, check=True)
    segment = store.get_json(keys.chunk_manifest_key(job_id, ledger.chunk(job_id, 0)))["segment"][
        "key"
    ]
    store.delete(segment)
    local_farm.farm("resume", job_id, check=True)

    failed = wait_final(local_farm, job_id, 300)
    assert failed["state"] == "failed", failed
    assert "segment 0 is gone from the store" in failed["error"]
    assert "`farm retry` makes that chunk again" in failed["error"]

    retried = local_farm.farm("retry", job_id, check=True).stdout
    assert "chunk 0 is made again: its segment is gone from the store" in retried, retried
    done = wait_final(local_farm, job_id, 300)
    assert done["state"] == "done", done
    assert frame_count(local_farm, job_id, tmp_path) == 12
    # Its frames were still stored: the chunk was encoded again, not rendered again.
    events = ledger.events(job_id)
    remade = next(i for i, e in enumerate(events) if e["event"] == "chunk-remade")
    again = [e["event"] for e in events[remade:] if e.get("chunk") == 0]
    assert "chunk-encoding" in again and "chunk-rendering" not in again, again
