"""The simulator against a real local farm on the same small case. S and F are measured on this
machine (one direct run of the farm's render script with its Blender per worker at once, before and after the farm run; an encode and
a stitch), then the simulator predicts the job's makespan and the farm renders it; they must
agree within TOLERANCE, and within IN_RUN_TOLERANCE given what the workers measured in the run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import threading
import time
from fractions import Fraction
from pathlib import Path

from bench.common import LocalFarm
from bench.overhead import SCENE
from bench.sim import Fleet, Workload, simulate
from farm.adapters import cpus
from farm.adapters.proc import run
from farm.blender import command as blender
from farm.control.local import worker_cpus
from farm.core.chunking import Measurement, measure_saved_times
from farm.media.ffgraph import EncodeSettings, concat_argv, concat_list, frames_to_segment_argv
from farm.media.probe import probe_streams

TOLERANCE = 0.40
"""Relative error allowed on the makespan predicted from S and F measured beside the run: a
2-core machine shared with other work drifts between the measurement and the run."""
IN_RUN_TOLERANCE = 0.15
"""Relative error allowed when S and F come from the workers' own records of the run."""
FRAMES, CHUNK, WIDTH, HEIGHT, SAMPLES = 24, 6, 320, 180, 4


def _blender(out: Path) -> list[float]:
    """One one-thread run of the farm's own render script with the farm's Blender (the bpy
    wheel, as the workers run it): seconds from launch to each frame it announces."""
    out.mkdir(parents=True, exist_ok=True)
    nonce = secrets.token_hex(16)
    job = blender.job_file(
        scene=SCENE, out_dir=out, frames=list(range(1, CHUNK + 1)), nonce=nonce,
        settings=blender.RenderSettings(width=WIDTH, height=HEIGHT, samples=SAMPLES, threads=1),
    )  # fmt: skip
    job_path = out / "job.json"
    job_path.write_text(json.dumps(job))
    argv = blender.script_argv(blender=blender.WHEEL, job_path=job_path)
    started = time.monotonic()
    saved: list[float] = []

    def on_line(line: str) -> None:
        parsed = blender.script_line(line, nonce)
        if parsed is not None and parsed.kind == "FRAME":
            saved.append(time.monotonic() - started)

    assert run(argv, on_line=on_line).ok and len(saved) == CHUNK
    return saved


def _blender_wave(out: Path, workers: int) -> list[Measurement]:
    """One Blender run per worker at once, each on its worker's CPUs as `farm up` pins them."""
    shares = worker_cpus(workers, pin=True) or [cpus.available()] * workers

    runs: dict[int, list[float]] = {}

    def one(i: int) -> None:
        cpus.pin(shares[i])  # this thread, and so the Blender it starts
        runs[i] = _blender(out / str(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == workers, "a Blender run failed (its error is above)"
    return [measure_saved_times(runs[i]) for i in range(workers)]


def _mean(each: list[Measurement]) -> Measurement:
    return Measurement(
        startup_s=statistics.mean(x.startup_s for x in each),
        frame_s=statistics.mean(x.frame_s for x in each),
    )


def _measure(tmp: Path, workers: int) -> tuple[list[Measurement], float, float]:
    """S and F of a wave of Blender runs, then one chunk's encode and the job's stitch."""
    out, seq = tmp / "frames", tmp / "seq"
    seq.mkdir(parents=True)
    m = _blender_wave(out, workers)
    out = out / "0"
    for n in range(CHUNK):
        os.link(blender.frame_file(out, n + 1), seq / f"{n:06d}.png")
    settings = EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24))
    segment = tmp / "seg.mp4"
    started = time.monotonic()
    argv = frames_to_segment_argv(
        ffmpeg_bin="ffmpeg", pattern=seq / "%06d.png", out=segment, settings=settings,
        frame_count=CHUNK,
    )  # fmt: skip
    assert run(argv).ok
    probe_streams("ffprobe", segment)
    encode_s = time.monotonic() - started
    chunks = FRAMES // CHUNK
    copies = []
    for i in range(chunks):
        copies.append((tmp / f"{i}.mp4", Fraction(CHUNK, 24)))
        shutil.copyfile(segment, copies[-1][0])
    (tmp / "list.txt").write_text(concat_list(copies))
    started = time.monotonic()
    assert run(
        concat_argv(
            ffmpeg_bin="ffmpeg", list_file=tmp / "list.txt", out=tmp / "out.mp4", frames=FRAMES
        )
    ).ok
    probe_streams("ffprobe", tmp / "out.mp4")
    stitch_s = time.monotonic() - started
    return m, encode_s, stitch_s


def _predict(m: Measurement, encode_s: float, stitch_s: float, workers: int) -> float:
    work = Workload(
        frames=FRAMES, startup_s=m.startup_s, frame_s=m.frame_s, frame_cv=0.1,
        encode_startup_s=encode_s, encode_frame_s=0.0, stitch_s=stitch_s, task_latency_s=0.05,
    )  # fmt: skip
    # The local farm's workers encode after each render: no NVENC here (workers.host.alongside, auto).
    fleet = Fleet(gpus=workers, boot_s=0.0, encode_alongside=False)
    return simulate(work, fleet, CHUNK).makespan_s


def test_simulated_makespan_matches_the_local_farm(bench_farm: LocalFarm, tmp_path: Path) -> None:
    before, encode_s, stitch_s = _measure(tmp_path, bench_farm.workers)
    out = bench_farm.farm(
        "submit", str(SCENE), "--frames", f"1-{FRAMES}", "--chunk-size", str(CHUNK),
        "--resolution", f"{WIDTH}x{HEIGHT}", "--samples", str(SAMPLES), "--wait", "--json",
    )  # fmt: skip
    # Measured again after the run: the mean brackets the farm's run on a machine whose load moves.
    m = _mean(before + _blender_wave(tmp_path / "after", bench_farm.workers))
    predicted = _predict(m, encode_s, stitch_s, bench_farm.workers)
    ledger, job_id = bench_farm.ledger(), json.loads(out.stdout)["id"]
    t = {e["event"]: e["t"] for e in reversed(ledger.events(job_id))}
    real = t["job-done"] - t["submitted"]
    # The same prediction from what the farm's workers measured during this very run: it checks
    # the simulator's scheduling without the drift of a busy machine between measurement and run.
    chunks = ledger.chunks(job_id)
    own = _mean(
        [Measurement(startup_s=float(c["blender_startup_s"]), frame_s=float(c["frame_s"]))
         for c in chunks]
    )  # fmt: skip
    own_encode = statistics.mean(float(c["encode_s"]) + float(c["gather_s"]) for c in chunks)
    own_stitch = float(ledger.job(job_id)["stitch_s"])
    in_run = _predict(own, own_encode, own_stitch, bench_farm.workers)

    error, in_run_error = abs(real - predicted) / real, abs(real - in_run) / real
    print(
        f"\nmeasured first: S={m.startup_s:.2f} s F={m.frame_s:.3f} s encode={encode_s:.2f} s "
        f"stitch={stitch_s:.2f} s -> simulated {predicted:.2f} s; in-run: S={own.startup_s:.2f} s "
        f"F={own.frame_s:.3f} s -> {in_run:.2f} s; farm {real:.2f} s; errors {error:.1%} "
        f"(tolerance {TOLERANCE:.0%}) and {in_run_error:.1%} ({IN_RUN_TOLERANCE:.0%})"
    )
    assert in_run_error <= IN_RUN_TOLERANCE, f"simulated {in_run:.2f} s vs farm {real:.2f} s"
    assert error <= TOLERANCE, f"simulated {predicted:.2f} s vs farm {real:.2f} s"
