"""`python -m bench.encode_bench [--seconds 10] [--quick]`: an encode job on a local farm against
one plain ffmpeg run of the same master and settings, and the stitch against copying its bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.common import Row
from farm.media.ffgraph import EncodeSettings, choose_encoder, codec_options
from farm.media.master import probe_master
from farm.media.transcode_graph import default_quality

FFMPEG = ["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]


def make_master(path: Path, seconds: float) -> Path:
    """1920x1080 at 23.976 fps, long-GOP H.264 with B-frames, and a stereo tone."""
    subprocess.run(
        [
            *FFMPEG,
            "-f",
            "lavfi",
            "-i",
            f"testsrc2=s=1920x1080:r=24000/1001:d={seconds}",
            "-f",
            "lavfi",
            "-i",
            f"sine=f=440:r=48000:d={seconds}",
            "-ac",
            "2",
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-crf",
            "16",
            "-x264-params",
            "keyint=48",
            "-c:a",
            "aac",
            "-shortest",
            str(path),
        ],
        check=True,
    )
    return path


def plain_argv(master: Path, out: Path, args: argparse.Namespace, segment: int) -> list[str]:
    """What a user would run by hand: same scaler, encoder, quality, preset and GOP."""
    rate = probe_master("ffprobe", "ffmpeg", master).info.rate
    encoder = choose_encoder(args.codec, nvenc=False)
    settings = EncodeSettings(
        codec=args.codec,
        encoder=encoder,
        fps=rate,
        quality=default_quality(encoder),
        preset=args.preset,
    )
    opts = codec_options(settings, segment)
    opts.pop("r", None)
    width, height = args.resolution.split("x")
    scale = f"scale=w={width}:h={height}:flags=lanczos,format=yuv420p"
    return [
        *FFMPEG,
        "-i",
        str(master),
        "-map",
        "0:v:0",
        "-map",
        "0:a?",
        "-vf",
        scale,
        *_options_argv(opts),
        "-c:a",
        "copy",
        str(out),
    ]


def _options_argv(opts: dict[str, Any]) -> list[str]:
    """ffmpeg-python's output options as ffmpeg takes them: `-key value`, or `-key` alone."""
    return [a for k, v in opts.items() for a in (f"-{k}", *(() if v is None else (str(v),)))]


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True)
    return time.monotonic() - started


def run(args: argparse.Namespace, work: Path) -> tuple[dict[str, Any], list[Row]]:
    master = make_master(work / "master.mov", args.seconds)
    frames = probe_master("ffprobe", "ffmpeg", master).info.frame_count
    segment = args.segment_frames
    plain_s = timed(plain_argv(master, work / "plain.mp4", args, segment))
    farm = common.start_farm(workers=args.workers or os.cpu_count() or 1, base=work / "farm")
    try:
        started = time.monotonic()
        submit = farm.farm(
            "submit",
            str(master),
            "--codec",
            args.codec,
            "--resolution",
            args.resolution,
            "--preset",
            args.preset,
            "--segment-frames",
            str(segment),
            "--wait",
            "--json",
        )
        farm_s = time.monotonic() - started
        summary = json.loads(submit.stdout)
        job = farm.ledger().job(summary["id"])
        store = farm.store()
        seg_dir = work / "segments"
        seg_keys = sorted(store.keys(f"jobs/{summary['id']}/segments/"))
        for key in seg_keys:
            store.get_file(key, seg_dir / Path(key).name)
    finally:
        farm.close()
    seg_bytes = sum(p.stat().st_size for p in seg_dir.iterdir())
    started = time.monotonic()
    with (work / "copied.mp4").open("wb") as out:
        for part in sorted(seg_dir.iterdir()):
            with part.open("rb") as src:
                shutil.copyfileobj(src, out)
        out.flush()
        os.fsync(out.fileno())
    cp_s = time.monotonic() - started
    join_s, stitch_s = float(job.get("fetch_join_s", 0)), float(job.get("stitch_s", 0))
    encode_s = [c.get("encode_s") for c in summary["chunks"]]
    results = {
        "master": {"frames": frames, "seconds": args.seconds, "size": "1920x1080"},
        "settings": {
            "codec": args.codec,
            "resolution": args.resolution,
            "preset": args.preset,
            "segment_frames": segment,
            "workers": farm.workers,
        },
        "plain_ffmpeg_s": round(plain_s, 2),
        "farm_job_s": round(farm_s, 2),
        "farm_elapsed_s": summary.get("elapsed_s"),
        "segment_encode_s": encode_s,
        "stitch_join_s": round(join_s, 3),
        "stitch_total_s": round(stitch_s, 3),
        "cp_same_bytes_s": round(cp_s, 4),
        "segment_bytes": seg_bytes,
        "state": summary["state"],
    }
    rows = [
        Row(
            bench="encode",
            case=f"{frames} frames 1080p->{args.resolution} {args.codec}",
            farm=f"{farm_s:.1f} s ({farm.workers} workers, submit to done)",
            baseline=f"{plain_s:.1f} s (one ffmpeg)",
            ratio=farm_s / plain_s,
        ),
        Row(
            bench="encode",
            case=f"stitch: fetch and join (concat + audio mux), {seg_bytes / 1e6:.1f} MB",
            farm=f"{join_s:.3f} s",
            baseline=f"{cp_s:.3f} s (copy same bytes)",
            ratio=join_s / cp_s if cp_s else None,
        ),
        Row(
            bench="encode",
            case="stitch task: fetch, verify, probe, join, check, upload",
            farm=f"{stitch_s:.3f} s",
            baseline=f"{cp_s:.3f} s (copy same bytes)",
            ratio=stitch_s / cp_s if cp_s else None,
        ),
    ]
    return results, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.encode_bench", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--codec", default="h264")
    parser.add_argument("--resolution", default="3840x2160")
    parser.add_argument("--preset", default="veryfast")
    parser.add_argument("--segment-frames", type=int, default=48)
    parser.add_argument("--workers", type=int, default=0, help="default: one per core")
    parser.add_argument("--quick", action="store_true", help="4 s master, 1280x720 output")
    parser.add_argument("--out", type=Path, default=common.ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.resolution = 4.0, "1280x720"
    work = Path(tempfile.mkdtemp(prefix="farm-encode-bench-"))
    started = time.time()
    try:
        results, rows = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {"machine": common.machine(), "started": started, "finished": time.time(),
               "quick": args.quick, "encode": results, "rows": [_row(r) for r in rows]}  # fmt: skip
    path = args.out / time.strftime("bench-%Y%m%d-%H%M%S.json")
    common.dump(path, results)
    print("| case | farm | baseline | ratio |\n|---|---|---|---|")
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else ""
        print(f"| {r.case} | {r.farm} | {r.baseline} | {ratio} |")
    print(f"\nresults: {path}")


def _row(row: Row) -> dict[str, Any]:
    return {k: getattr(row, k) for k in ("bench", "case", "farm", "baseline", "ratio", "note")}


if __name__ == "__main__":
    main()
