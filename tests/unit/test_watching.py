"""The pure parts of watching the farm: census arithmetic, webhook bodies and signatures, the
thumbnail command line, and the job pages' HTML."""

from __future__ import annotations

import hashlib
import hmac
import json

from farm.control import census
from farm.core import notices
from farm.core.report import job_summary
from farm.web import jobpage


def test_a_transcode_chunk_waits_on_the_encode_queue() -> None:
    counts = census.Census()
    job = {"kind": "transcode", "state": "running"}
    census.add_chunk(counts, job, {"state": "queued", "attempt": "0"})
    census.add_chunk(counts, job, {"state": "transcoding", "attempt": "1"})
    assert counts.waiting == {"encode": 1} and counts.running == {"encode": 1}
    assert counts.backlog_per_worker()["encode"] == 2.0  # no worker: the chunk count itself


def test_a_paused_jobs_waiting_chunks_are_not_backlog() -> None:
    counts = census.Census()
    census.add_chunk(counts, {"kind": "render", "state": "paused"}, {"state": "queued"})
    assert counts.backlog()["render"] == 0
    assert counts.chunks[("render", "queued")] == 1


def test_draining_workers_do_not_serve_the_backlog() -> None:
    counts = census.Census()
    census.add_workers(counts, {
        "a": {"queues": ["render"], "cycles_device": "OPTIX", "nvenc": True},
        "b": {"queues": ["render"], "draining": "spot interruption"},
    })  # fmt: skip
    census.add_chunk(counts, {"kind": "render", "state": "running"}, {"state": "queued"})
    census.add_chunk(counts, {"kind": "render", "state": "running"}, {"state": "rendering"})
    assert counts.serving == {"render": 1}
    assert counts.backlog_per_worker()["render"] == 2.0
    assert counts.workers[("render", "CPU", "false", "true")] == 1


def test_the_signature_is_hmac_sha256_of_the_body() -> None:
    body = b'{"event":"job.done"}'
    expected = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert notices.sign(body, "k") == f"sha256={expected}"
    assert notices.verify(body, "k", f"sha256={expected}")
    assert not notices.verify(body + b" ", "k", f"sha256={expected}")


def test_a_budget_pause_and_a_users_pause_are_different_events() -> None:
    assert notices.event_for("paused", {"paused_reason": "budget: spent $4"}) == "job.budget"
    assert notices.event_for("paused", {"paused_reason": "by a user"}) == "job.paused"
    assert notices.event_for("running", {}) is None


def test_the_payload_says_what_happened_to_which_job() -> None:
    notice = notices.Notice(id="n1", job_id="j1", event="job.failed", t=1.0, url="http://x")
    job = {"kind": "render", "state": "failed", "error": "chunk 3 failed 3 times",
           "spec": json.dumps({"source_name": "shot.blend"}), "chunks_total": "4"}  # fmt: skip
    body = notices.payload(notice, job, {"spent": 1.5})
    assert body["event"] == "job.failed" and body["id"] == "n1"
    assert body["job"]["source_name"] == "shot.blend" and body["job"]["chunks_total"] == 4
    assert body["job"]["spend"] == {"spent": 1.5}
    assert notices.Notice.from_member(notice.to_member()) == notice


def test_the_jobs_page_shows_cost_only_when_metered() -> None:
    job = {"id": "j1", "kind": "render", "state": "running", "frames_total": "10",
           "chunks_total": "5", "created": "100"}  # fmt: skip
    summary = job_summary(job, [], now=200)
    assert "<th>cost</th>" not in jobpage.jobs_page([(summary, None)])
    assert "$1.25 of ~$3.00" in jobpage.jobs_page([(summary, (1.25, 3.0))])
    # A local farm's fractions of a cent, as `farm status` writes them, not "$0.00".
    assert "$0.0021 of ~$0.0042" in jobpage.jobs_page([(summary, (0.0021, 0.0042))])


def test_log_links_are_labelled_by_phase_and_attempt() -> None:
    summary = job_summary({"id": "j1", "state": "done"}, [{"index": "0", "state": "done"}])
    html = jobpage.job_page(
        summary, chunk_times={0: (10.0, 20.0)}, thumbs=[], logs={0: ["00000-render-attempt2.log"]},
        cost=None, now=30.0,
    )  # fmt: skip
    assert 'title="00000-render-attempt2.log">render 2</a>' in html
    assert 'data-chunk="0" data-state="done"' in html


def test_status_says_when_the_first_frame_and_its_thumbnail_reached_the_store() -> None:
    from farm.core.report import status_table, to_text

    job = {"id": "j1", "state": "running", "created": "100", "first_frame_at": "104.25",
           "first_thumbnail_at": "104.5"}  # fmt: skip
    summary = job_summary(job, [], now=110)
    assert (summary["first_frame_s"], summary["first_thumbnail_s"]) == (4.25, 4.5)
    text = to_text(status_table(summary))
    assert "first   frame in the store 4.2 s after submit, its thumbnail 4.5 s" in text
    assert "first" not in to_text(status_table(job_summary({"id": "j2", "created": "1"}, [])))


def test_the_eta_leaves_out_the_time_a_job_spent_paused() -> None:
    from farm.core.report import eta_s, status_table, to_text

    # 100 s since submit, 60 s of them paused (an earlier pause of 40 s, and 20 s of this one),
    # 10 of 20 frames: it ran 40 s for 10 frames, so 40 s to go, not the 100 s elapsed gives.
    chunks = [{"index": "0", "state": "done", "frames": "[1,2,3,4,5,6,7,8,9,10]",
               "frames_rendered": "10"}, {"index": "1", "state": "queued",
               "frames": "[11,12,13,14,15,16,17,18,19,20]"}]  # fmt: skip
    job = {"id": "j1", "state": "paused", "created": "100", "frames_total": "20",
           "paused_s": "40", "paused": "180"}  # fmt: skip
    paused = job_summary(job, chunks, now=200)
    assert (paused["elapsed_s"], paused["paused_s"], paused["active_s"]) == (100, 60, 40)
    assert eta_s(paused) is None  # no end while paused
    assert "elapsed 01:40 (paused 01:00)" in to_text(status_table(paused))
    resumed = job_summary({**job, "state": "running", "paused_s": "60", "paused": ""}, chunks,
                          now=200)  # fmt: skip
    assert (resumed["paused_s"], eta_s(resumed)) == (60, 40)
    never = job_summary({**job, "state": "running", "paused_s": "", "paused": ""}, chunks, now=200)
    assert eta_s(never) == 100 and "elapsed 01:40\n" in to_text(status_table(never)) + "\n"
    page = jobpage.job_page(resumed, chunk_times={}, thumbs=[], logs={}, cost=None, now=200.0)
    assert "elapsed 1:40 (paused 1:00)" in page
    # A chunk from before the pause still renders: the job has not stood still in this pause
    # yet (the ledger adds nothing for it if the chunk still runs at the resume).
    rendering = [chunks[0], {**chunks[1], "state": "rendering", "frames_rendered": "3"}]
    assert job_summary(job, rendering, now=200)["paused_s"] == 40
