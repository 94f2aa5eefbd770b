"""Where a finished job's time went, from its ledger record: chunk hashes (timings the workers
wrote) and the event list (when each transition happened). Pure.
"""

from __future__ import annotations

from typing import Any

PARTS = (
    "queue_wait",
    "scene_fetch",
    "blender_launch",
    "scene_load",
    "render_frames",
    "encode_wait",
    "encode_gather",
    "encode",
    "segment_upload",
    "ledger_other",
)


def _f(d: dict[str, str], key: str) -> float:
    try:
        return float(d.get(key) or 0.0)
    except ValueError:
        return 0.0


def _first(events: list[dict[str, Any]], kind: str, chunk: int | None = None) -> float | None:
    for e in events:
        if e.get("event") == kind and (chunk is None or e.get("chunk") == chunk):
            return float(e["t"])
    return None


def chunk_parts(
    chunk: dict[str, str], events: list[dict[str, Any]], ready_t: float
) -> dict[str, float]:
    """Seconds per part for one chunk (its last attempt). Upload of frames runs in the
    background while Blender renders; it is reported apart, not in the sum."""
    i = int(chunk["index"])
    t_render = _first(events, "chunk-rendering", i) or ready_t
    t_rendered = _first(events, "chunk-rendered", i) or t_render
    t_encoding = _first(events, "chunk-encoding", i) or t_rendered
    t_done = _first(events, "chunk-done", i) or t_encoding
    fetch, launch, load = (
        _f(chunk, "fetch_s"),
        _f(chunk, "blender_launch_s"),
        _f(chunk, "scene_load_s"),
    )
    render_wall = t_rendered - t_render
    blender_run = _f(chunk, "render_s") - fetch
    gather, enc, seg = _f(chunk, "gather_s"), _f(chunk, "encode_s"), _f(chunk, "segment_upload_s")
    parts = {
        "queue_wait": max(t_render - ready_t, 0.0),
        "scene_fetch": fetch,
        "blender_launch": launch,
        "scene_load": load,
        "render_frames": max(blender_run - launch - load, 0.0),
        "encode_wait": max(t_encoding - t_rendered, 0.0),
        "encode_gather": gather,
        "encode": enc,
        "segment_upload": seg,
    }
    busy = render_wall + (t_done - t_encoding)
    accounted = sum(v for k, v in parts.items() if k not in ("queue_wait", "encode_wait"))
    parts["ledger_other"] = max(busy - accounted, 0.0)
    parts["frame_upload_overlapped"] = _f(chunk, "upload_s")
    parts["frames"] = float(chunk.get("frame_count") or 0)
    parts["busy"] = busy
    return parts


def breakdown(
    job: dict[str, str],
    chunks: list[dict[str, str]],
    events: list[dict[str, Any]],
    submit_wall: float,
    workers: int,
) -> dict[str, Any]:
    submitted = _first(events, "submitted") or float(job.get("created") or submit_wall)
    planned = _first(events, "planned")
    probes = int(_first_count(events) or len(chunks))
    per_chunk = []
    for chunk in chunks:
        ready = submitted if planned is None or int(chunk["index"]) < probes else planned
        per_chunk.append(chunk_parts(chunk, events, ready))
    gate = _first(events, "stitch-gate") or submitted
    done = _first(events, "job-done") or gate
    busy = sum(p["busy"] for p in per_chunk) + (done - gate)
    span = done - submitted
    sums = {k: round(sum(p[k] for p in per_chunk), 2) for k in (*PARTS, "frame_upload_overlapped")}
    means = {k: round(v / max(len(per_chunk), 1), 2) for k, v in sums.items()}
    line = ", ".join(
        f"{k.replace('_', ' ')} {means[k]:.2f}"
        for k in ("blender_launch", "scene_load", "render_frames", "frame_upload_overlapped",
                  "encode", "queue_wait", "encode_wait", "ledger_other")
    )  # fmt: skip
    return {
        "chunks": len(chunks),
        "chunk_size_chosen": job.get("chunk_size", ""),
        "chunk_plan": job.get("chunk_plan", ""),
        "probed": planned is not None,  # its own probe wave planned the rest (auto, no memory)
        "submit_to_first_claim_s": round(
            (_first(events, "chunk-rendering") or submitted) - submit_wall, 2
        ),
        "stitch_s": round(done - gate, 2),
        "job_span_s": round(span, 2),
        "worker_idle_s": round(max(workers * span - busy, 0.0), 2),
        "sum_s": sums,
        "mean_per_chunk_s": means,
        "per_chunk": [{k: round(v, 3) for k, v in p.items()} for p in per_chunk],
        "per_chunk_line": "mean s " + line,
        "table": f"sum over chunks (s): {sums}; stitch {round(done - gate, 2)} s; "
        f"worker idle {round(max(workers * span - busy, 0.0), 2)} s",
    }


def _first_count(events: list[dict[str, Any]]) -> int | None:
    """How many chunks the job had before an auto plan added the rest (from 'submitted')."""
    for e in events:
        if e.get("event") == "submitted":
            return int(e.get("chunks", 0)) or None
    return None
