"""Preview frames first, then a hold, on a real local farm: `--preview 3 --hold` renders the first,
middle and last frames, the job stands `held` with the others unrendered and an estimate of the
rest on its status and page; `farm resume` renders the rest, and the video has every frame once.
The seconds from submit to the first preview frame on the job page (fetched over HTTP as a person
would) are printed for the record."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import DEMO, LocalFarm
from tests.e2e.farmtools import frame_count, status, wait_final, wait_for

pytestmark = pytest.mark.e2e
TINY = ("--frames", "1-8", "--chunk-size", "2", "--resolution", "64x36", "--samples", "1")


def _page(farm: LocalFarm, job_id: str) -> str:
    s = farm.settings()
    answer = requests.get(f"{s['web_url']}/jobs/{job_id}",
                          auth=(s["flower_user"], s["flower_password"]), timeout=30)  # fmt: skip
    answer.raise_for_status()
    return answer.text


def _preview_shown(page: str) -> list[int]:
    """The preview frames the page shows as thumbnails."""
    block = page.split('id="preview"', 1)[1].split("</div>", 1)[0] if 'id="preview"' in page else ""
    return [int(f) for f in re.findall(r'alt="frame (\d+)"', block)]


def test_a_preview_then_a_hold_then_the_rest_on_resume(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a tiny 8-frame render submitted with --preview 3 --hold
    submitted = time.monotonic()
    said = local_farm.farm("submit", str(DEMO), *TINY, "--preview", "3", "--hold", "--json",
                           check=True)  # fmt: skip
    job_id = json.loads(said.stdout)["id"]
    # THEN the job page shows a preview frame as soon as one is rendered
    wait_for("a preview frame on the job page", lambda: bool(_preview_shown(_page(local_farm, job_id))),
             300, local_farm)  # fmt: skip
    first_preview_s = time.monotonic() - submitted
    print(f"\nsubmit to the first preview frame on the job page: {first_preview_s:.1f} s")
    # AND the job is held once the three preview frames are done
    wait_for("the job held", lambda: status(local_farm, job_id)["state"] == "held", 300,
             local_farm)  # fmt: skip
    ledger = local_farm.ledger()
    assert [json.loads(c["frames"]) for c in ledger.chunks(job_id)] == [[1], [5], [8]]
    assert sorted(ledger.frame_records(job_id)) == [1, 5, 8]  # the other frames did not render
    page = _page(local_farm, job_id)
    assert sorted(_preview_shown(page)) == [1, 5, 8]
    assert f"held: <code>farm resume {job_id}</code> renders the rest" in page
    # AND its status says so, with the rest's estimate from the preview's timings
    text = local_farm.farm("status", job_id, check=True).stdout
    assert "preview frames 1, 5, 8 first: 3/3 done" in text
    assert f"held: `farm resume {job_id}` renders the rest" in text
    assert "the rest  5 frames in 3 chunks, about" in text
    shown = json.loads(local_farm.farm("status", job_id, "--json", check=True).stdout)
    assert shown["state"] == "held" and shown["preview"]["frames"] == [1, 5, 8]
    assert shown["preview"]["rest_estimate"]["frames"] == 5
    # WHEN it is resumed
    local_farm.farm("resume", job_id, check=True)
    # THEN it ends done, the video has every frame once
    assert wait_final(local_farm, job_id, 300)["state"] == "done"
    assert frame_count(local_farm, job_id, tmp_path) == 8
    chunks = ledger.chunks(job_id)
    assert sorted(f for c in chunks for f in json.loads(c["frames"])) == list(range(1, 9))
    # AND, by the job's events, the preview chunks were done before any other chunk was claimed
    events = [e for e in ledger.events(job_id) if "event" in e]
    order = [e["event"] for e in events]
    held_at = order.index("job-held")
    preview_done = [i for i, e in enumerate(events)
                    if e["event"] == "chunk-done" and e.get("chunk") in (0, 1, 2)]  # fmt: skip
    rest_claimed = [i for i, e in enumerate(events)
                    if e["event"] == "chunk-rendering" and e.get("chunk", 0) >= 3]  # fmt: skip
    assert len(preview_done) >= 3 and rest_claimed
    assert max(preview_done) < held_at < min(rest_claimed)
