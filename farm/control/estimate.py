"""`farm submit --estimate`: a render job planned and priced without queueing it, from the scene's
remembered timings or, when the farm has none, from a short probe job of a few frames.

The plan is farm.core.chunking's (the same rule as `--chunk-size auto`), the money farm.core.cost's; the
probe's measurement is remembered, so the job submitted next is sized from it and agrees.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.adapters.settings import Settings
from farm.adapters.store import sha256_file
from farm.blender import assets
from farm.core import cost, keys
from farm.core.chunking import Measurement
from farm.core.errors import FarmError, SpecError
from farm.core.spec import FrameRange, JobKind, JobSpec
from farm.core.state import ENDED
from farm.ledger import Ledger, speeds
from farm.ledger.ports import SubmitLedger

if TYPE_CHECKING:
    from farm.control.intake import Stored

log = logging.getLogger(__name__)

PROBE_FRAMES = 3
"""Frames the probe renders: three saves give two frame-to-frame intervals."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimated:
    estimate: cost.Estimate
    measurement: Measurement
    workers: int
    instance_type: str
    region: str
    prices_as_of: str
    probe_job: str = ""
    """The probe job's id when there were no remembered timings ('' otherwise)."""
    probe_cost: float = 0.0
    probe_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            **self.estimate.to_json(),
            "startup_s": round(self.measurement.startup_s, 3),
            "frame_s": round(self.measurement.frame_s, 3),
            "timings": self.measurement.source,
            "workers": self.workers,
            "priced_as": f"{self.instance_type} in {self.region} (prices of {self.prices_as_of})",
            "probe_job": self.probe_job,
            "probe_cost": round(self.probe_cost, 6),
            "probe_s": round(self.probe_s, 1),
        }


def scene_key_of(source: Path | Stored) -> str:
    """The scene's key in the store, as submit will store it: its measurement is remembered
    under it."""
    if not isinstance(source, Path):  # uploaded through the API, verified by its hash
        return source.source_key
    return keys.scene_key(sha256_file(source), source.suffix.lower() or ".bin")


def estimate_job(
    settings: Settings,
    spec: JobSpec,
    source: Path | Stored,
    traced: assets.Traced | None = None,
    *,
    probe_timeout_s: float = 1800.0,
    say: Callable[[str], None] = lambda _: None,
    owner: str = "",
) -> Estimated:
    """`say`: a line for the person waiting (the probe job's id, and how to stop it).
    `source`: the scene here, or (the API) in the store already; `owner`: the probe job's."""
    if spec.kind is not JobKind.RENDER:
        raise SpecError("--estimate prices render jobs (a .blend scene); transcodes are not timed")
    prices = cost.load_prices(settings.price_file)
    price = prices.price(settings.region, settings.local_instance_type)
    ledger: SubmitLedger = Ledger.from_url(settings.redis_url)
    ledger.ping()
    scene, resolution = scene_key_of(source), str(spec.resolution)
    m = ledger.measurement(scene, resolution=resolution, samples=spec.samples)
    probe_job, probe_cost, probe_s = "", 0.0, 0.0
    if m is None:
        probe_job, m, probe_cost, probe_s = probe(
            settings, ledger, spec, source, traced, timeout_s=probe_timeout_s, say=say,
            owner=owner,
        )  # fmt: skip
        ledger.save_measurement(scene, m, resolution=resolution, samples=spec.samples)
    pool = speeds.render_pool(settings, ledger)
    est = cost.estimate(
        frames=spec.frames.count, chunk_size=spec.chunk_size, m=m, pool=pool, price=price
    )
    return Estimated(
        estimate=est,
        measurement=m,
        workers=pool.workers,
        instance_type=settings.local_instance_type,
        region=settings.region,
        prices_as_of=prices.as_of,
        probe_job=probe_job,
        probe_cost=probe_cost,
        probe_s=probe_s,
    )


def probe_measurement(chunk: dict[str, str], frames: int, source: str) -> Measurement:
    """S and F from a finished probe chunk as the farm pays for them: F is a frame's share of
    the render attempt after Blender's start-up (rendering, saving, uploading: whichever is
    slower sets the pace), S everything else the chunk's attempts were paid for (start-up,
    scene fetch, the segment encode), so an estimate prices whole chunks, not only frames."""
    paid_s = float(chunk.get("gpu_s") or 0)
    startup_s = float(chunk.get("blender_startup_s") or 0) + float(chunk.get("fetch_s") or 0)
    render_s = float(chunk.get("render_s") or paid_s)
    frame_s = max(
        float(chunk.get("frame_s") or 0),
        (render_s - startup_s) / max(frames, 1),
        float(chunk.get("upload_s") or 0) / max(frames, 1),
    )
    return Measurement(
        startup_s=max(paid_s - frames * frame_s, 0.0), frame_s=max(frame_s, 1e-3), source=source
    )


def measured(chunks: list[dict[str, str]], source: str) -> Measurement:
    """S and F of a probe job from every chunk it ended with: an idle worker may have split its
    one chunk, and each part paid its own start-up for its own frames."""
    counts = [(c, len(json.loads(c.get("frames") or "[]"))) for c in chunks]
    parts = [(probe_measurement(c, n, source), n) for c, n in counts if n]
    frames = sum(n for _, n in parts)
    if not frames:
        raise FarmError(f"{source} ended with no frames to time")
    return Measurement(
        startup_s=sum(m.startup_s for m, _ in parts) / len(parts),
        frame_s=sum(m.frame_s * n for m, n in parts) / frames,
        source=source,
    )


def probe(
    settings: Settings,
    ledger: SubmitLedger,
    spec: JobSpec,
    source: Path | Stored,
    traced: assets.Traced | None,
    *,
    timeout_s: float,
    say: Callable[[str], None] = lambda _: None,
    owner: str = "",
) -> tuple[str, Measurement, float, float]:
    """Render a few of the scene's frames as a job of one chunk, at the top priority, and time
    it. Returns the probe job's id, the measurement, what the probe cost and how long it took.
    The probe is cancelled if it does not end in `timeout_s`, or if the wait for it is
    interrupted (Ctrl-C): it never runs on, billed, with no one waiting for it."""
    from farm.control.intake import create_job, submit

    # Spread over the range (first, middle, last): an animation's frames are rarely alike.
    stride = max(1, (spec.frames.count - 1) // (PROBE_FRAMES - 1))
    frames = spec.frames.frames[::stride][:PROBE_FRAMES]
    probe_spec = replace(
        spec,
        frames=FrameRange(first=frames[0], last=frames[-1], step=spec.frames.step * stride),
        chunk_size=len(frames),
    )
    started = time.monotonic()
    if isinstance(source, Path):
        job_id = submit(
            settings, probe_spec, source, traced, priority=100, max_cost=0, owner=owner
        ).job_id
    else:
        job_id = create_job(
            settings, probe_spec, source.source_key, source.sha256, source.manifest,
            priority=100, max_cost=0, owner=owner,
        ).job_id  # fmt: skip
    say(
        f"probe job {job_id}: {len(frames)} frames at the job's settings (cancelled if not done "
        f"in {timeout_s / 60:.0f} min; Ctrl-C cancels it)"
    )
    deadline = started + timeout_s
    try:
        while True:
            state = ledger.job(job_id).get("state", "")
            if state in ENDED:
                break
            if time.monotonic() > deadline:
                raise FarmError(f"the probe job {job_id} did not finish in {timeout_s:.0f} s")
            time.sleep(0.5)
    except BaseException:
        try:
            if ledger.job(job_id).get("state", "") not in ENDED:
                ledger.cancel_job(job_id)
        except FarmError:  # Redis gone too: say what to run, keep the first error
            say(f"the probe job {job_id} may still run: `farm cancel {job_id}` stops it")
        raise
    if state != "done":
        raise FarmError(f"the probe job {job_id} {state}: {ledger.job(job_id).get('error', '')}")
    m = measured(ledger.chunks(job_id), f"probe job {job_id}, {len(frames)} frames")
    spent = cost.job_cost(ledger.cost_record(job_id)).spent
    return job_id, m, spent, time.monotonic() - started
