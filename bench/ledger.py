"""The ledger alone, driven as 1,000 workers would drive it, on one Redis: each chunk (one frame)
goes through the Ledger calls a worker that renders and encodes makes, in its order
(workers/attempt/policy.py, lifecycle.py, lease.py, workers/phases/frames.py): claim, frame
started, frame recorded (with the job's first-frame time, in the same round trip), lease renewed,
rendered, claim for the segment, done with the completion gate.

Baseline: the same client processes doing as many round trips with PING as the chunks took
(counted on the client's connection), so the ratio says how many PING round trips a chunk
transition costs: five transitions a chunk (two claims, a renewal, rendered, done), seven round
trips.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import redis

from bench.common import Row, scratch_redis
from farm.core.pipeline import PHASES, Phase
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.ledger import Ledger
from workers.attempt.policy import BLOCK_AFTER

RENDER, SEGMENT = PHASES[Phase.RENDER], PHASES[Phase.SEGMENT]
TRANSITIONS_PER_CHUNK = 5
"""Claim, renew, rendered, claim (segment), done: the chunk's moves and its lease."""
METER = {"instance_type": "g5.xlarge", "lifecycle": "spot", "price_per_s": "0.000125"}
"""What workers/__main__.py puts on every claim of a worker (cost.Instance.claim_fields)."""
RENDERED = {  # what render_frames records with the render's done move
    "blender_launch_s": 0.61, "blender_startup_s": 0.78, "scene_load_s": 0.13, "frame_s": 0.07,
    "render_s": 1.24, "fetch_s": 0.05, "upload_s": 0.34, "frames_rendered": 1,
    "frames_reused": 0,
}  # fmt: skip
ENCODED = {  # and segment_chunk with the segment's
    "encoder": "libx264", "encode_s": 0.18, "gather_s": 0.01, "segment_upload_s": 0.02,
    "segment_bytes": 3034, "frames_fetched_bytes": 0,
}  # fmt: skip


def chunk_life(ledger: Ledger, job_id: str, index: int, frame: int, worker: str) -> None:
    """One one-frame chunk, every Ledger call a worker makes for it, in order."""
    claim = ledger.claim(job_id, index, RENDER.running, only_from=RENDER.claim_from, lease_s=30,
                         worker=worker, block_after=BLOCK_AFTER, phase=str(RENDER.phase))  # fmt: skip
    token = claim.move.token
    ledger.set_chunk_fields(job_id, index, frame_on=frame, frame_s_live=0.0)  # uploader.starting
    # The attempt's first frame stored: its record, the chunk's progress, the job's first-frame time.
    ledger.record_frame(job_id, frame, 6512, "ab" * 32, chunk=index, first=True, frames_rendered=1)
    ledger.renew(job_id, index, token, 30)  # the lease keeper, every 2 s while the work runs
    # Rendered, and claimed for its segment on the same worker, in one round trip.
    _, claim = ledger.move_then_claim(
        job_id, index, RENDER.done, token=token,
        fields={"rendered_by": worker, **RENDERED}, then=SEGMENT.running,
        then_from=SEGMENT.claim_from, lease_s=30, worker=worker, block_after=BLOCK_AFTER,
        phase=str(SEGMENT.phase),
    )  # fmt: skip
    if claim is None:
        raise RuntimeError(f"chunk {job_id}/{index} was not claimed for its segment")
    move = ledger.move_chunk(job_id, index, SEGMENT.done, token=claim.move.token, gate=True,
                             **ENCODED)  # fmt: skip
    assert move.moved, move


class _Counting(redis.Connection):
    """Counts round trips: one packed send per command or pipeline."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _Counting.sends += 1
        super().send_packed_command(command, check_health)


def round_trips_per_chunk(url: str, job_id: str, index: int) -> int:
    """Round trips of one chunk's life, counted on the client's connection."""
    client = redis.Redis.from_url(url, decode_responses=True, connection_class=_Counting)
    ledger = Ledger(client)
    ledger.meter = METER
    chunk_life(ledger, job_id, index, index + 1, "w-count")  # loads the scripts
    before = _Counting.sends
    chunk_life(ledger, job_id, index + 1, index + 2, "w-count")
    return _Counting.sends - before


def _drive(url: str, jobs: list[str], chunks: int, workers: int, offset: int) -> float:
    """One client process: every chunk of `jobs`, as `workers` different workers in turn."""
    ledger = Ledger.from_url(url)
    ledger.meter = METER
    started = time.perf_counter()
    n = 0
    for job_id in jobs:
        for index in range(chunks):
            chunk_life(ledger, job_id, index, index + 1, f"w{offset + n % workers}")
            n += 1
    return time.perf_counter() - started


def _ping(url: str, count: int) -> float:
    ledger = Ledger.from_url(url)
    started = time.perf_counter()
    for _ in range(count):
        ledger.ping()
    return time.perf_counter() - started


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    clients = 4
    jobs, chunks, workers = (8, 50, 1000) if quick else (40, 250, 1000)
    with scratch_redis("farm-bench-ledger-") as url:
        ledger = Ledger.from_url(url)
        spec = build_render_spec(
            source_name="bench.blend", frames=f"1-{chunks}", chunk_size=1, resolution="64x64",
            fps=24, samples=1, codec="h264",
        )  # fmt: skip
        ids = [f"j-bench-{i:04d}" for i in range(jobs)]
        for job_id in [*ids, "j-bench-count"]:
            ledger.create_job(job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 1),
                              source_key="bench")  # fmt: skip
        trips_per_chunk = round_trips_per_chunk(url, "j-bench-count", 0)
        slices = [ids[i::clients] for i in range(clients)]
        per = workers // clients
        with multiprocessing.Pool(clients) as pool:
            started = time.perf_counter()
            pool.starmap(_drive, [(url, s, chunks, per, i * per) for i, s in enumerate(slices)])
            wall = time.perf_counter() - started
            trips = jobs * chunks * trips_per_chunk // clients
            started = time.perf_counter()
            pool.starmap(_ping, [(url, trips)] * clients)
            ping_wall = time.perf_counter() - started
        done = sum(int(ledger.job(j)["chunks_done"]) for j in ids)
        assert done == jobs * chunks, f"{done} of {jobs * chunks} chunks done"
        gates = sum(e["event"] == "stitch-gate" for j in ids for e in ledger.events(j))
        assert gates == jobs, f"{gates} completion gates opened for {jobs} jobs"
        transitions = jobs * chunks * TRANSITIONS_PER_CHUNK
        per_s = transitions / wall
        pings_per_s = trips * clients / ping_wall
    result = {
        "clients": clients,
        "simulated_workers": workers,
        "chunks": jobs * chunks,
        "transitions": transitions,
        "transitions_per_s": round(per_s, 1),
        "chunks_per_s": round(jobs * chunks / wall, 1),
        "ping_round_trips_per_s": round(pings_per_s, 1),
        "round_trips_per_chunk": trips_per_chunk,
        "ping_equivalents_per_transition": round(pings_per_s / per_s, 2),
    }
    row = Row(
        bench="ledger",
        case=f"{jobs * chunks} chunks, {workers} workers, {clients} clients",
        farm=f"{per_s:.0f} transitions/s ({jobs * chunks / wall:.0f} chunks/s)",
        baseline=f"{pings_per_s:.0f} PING/s",
        ratio=round(pings_per_s / per_s, 2),
        note=f"PING round trips a transition costs; {trips_per_chunk} round trips a chunk "
        "(frame records, events, cost and the gate included)",
    )
    return result, [row]
