"""How a job looks to a person: the status summary and the progress line (pure)."""

from __future__ import annotations

import json
import time
from typing import Any


def _f(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def chunk_summary(chunk: dict[str, str]) -> dict[str, Any]:
    frames = json.loads(chunk.get("frames", "[]"))
    started, finished = _f(chunk.get("started")), _f(chunk.get("finished"))
    return {
        "index": int(chunk.get("index", 0)),
        "state": chunk.get("state", ""),
        "frames": f"{frames[0]}-{frames[-1]}" if frames else "",
        "frame_count": len(frames),
        "frames_rendered": int(chunk.get("frames_rendered", 0) or 0),
        "worker": chunk.get("worker", ""),
        "attempt": int(chunk.get("attempt", 0) or 0),
        "failures": int(chunk.get("failures", 0) or 0),
        "interruptions": int(chunk.get("interruptions", 0) or 0),
        "duration_s": round(finished - started, 2) if started and finished else None,
        "render_s": _f(chunk.get("render_s")),
        "encode_s": _f(chunk.get("encode_s")),
        "encoder": chunk.get("encoder", ""),
        "error": chunk.get("error", ""),
    }


def job_summary(
    job: dict[str, str], chunks: list[dict[str, str]], now: float | None = None
) -> dict[str, Any]:
    now = now or time.time()
    created, finished = _f(job.get("created")), _f(job.get("finished"))
    chunk_list = [chunk_summary(c) for c in chunks]
    spec = json.loads(job.get("spec", "{}"))
    return {
        "id": job.get("id", ""),
        "kind": job.get("kind", ""),
        "state": job.get("state", ""),
        "chunks_total": int(job.get("chunks_total", 0)),
        "chunks_done": int(job.get("chunks_done", 0)),
        "frames_total": int(job.get("frames_total", 0)),
        "frames_rendered": sum(min(c["frames_rendered"], c["frame_count"]) for c in chunk_list),
        "output": job.get("output", ""),
        "chunk_size": job.get("chunk_size", ""),
        "chunk_plan": job.get("chunk_plan", ""),
        "error": job.get("error", ""),
        "spec": spec,
        "created": created,
        "elapsed_s": round((finished or now) - created, 2) if created else None,
        "chunks": chunk_list,
    }


def eta_s(summary: dict[str, Any]) -> float | None:
    done, total = int(summary["frames_rendered"]), int(summary["frames_total"])
    elapsed = float(summary["elapsed_s"] or 0)
    if not done or not elapsed or done >= total:
        return None
    return elapsed * (total - done) / done


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return (
        f"{seconds // 60:02d}:{seconds % 60:02d}"
        if seconds < 3600
        else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    )


def progress_line(summary: dict[str, Any], width: int = 30) -> str:
    total = max(summary["frames_total"], 1)
    done_frames = summary["frames_rendered"]
    filled = int(width * summary["chunks_done"] / max(summary["chunks_total"], 1))
    bar = "#" * filled + "-" * (width - filled)
    return (
        f"[{bar}] {summary['state']:<9} chunks {summary['chunks_done']}/{summary['chunks_total']}"
        f"  frames {done_frames}/{total}  elapsed {_clock(summary['elapsed_s'])}"
        f"  eta {_clock(eta_s(summary))}"
    )


def status_text(summary: dict[str, Any]) -> str:
    lines = [
        f"job {summary['id']}  {summary['kind']}  {summary['state']}",
        f"  chunks {summary['chunks_done']}/{summary['chunks_total']} done, frames "
        f"{summary['frames_rendered']}/{summary['frames_total']} rendered, elapsed "
        f"{_clock(summary['elapsed_s'])}",
    ]
    if summary["output"]:
        lines.append(f"  output  {summary['output']}")
    if summary.get("chunk_plan"):
        lines.append(f"  chunk size {summary['chunk_size']}: {summary['chunk_plan']}")
    if summary["error"]:
        lines.append(f"  error   {summary['error']}")
    lines.append(f"  {'chunk':>5}  {'frames':<11} {'state':<11} {'try':>3}  {'time':>7}  worker")
    for c in summary["chunks"]:
        dur = f"{c['duration_s']:.1f}s" if c["duration_s"] is not None else ""
        lines.append(
            f"  {c['index']:>5}  {c['frames']:<11} {c['state']:<11} {c['attempt']:>3}  {dur:>7}  {c['worker']}"
        )
        if c["error"] and c["state"] in ("failed", "queued", "rendered"):
            lines.append(f"         last error: {c['error'].splitlines()[0][:160]}")
    return "\n".join(lines)
