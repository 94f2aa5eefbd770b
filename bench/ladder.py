"""`python -m bench ladder`: a ladder's segments encoded as a ladder job encodes them (one ffmpeg per
segment: one decode, `split`, one encode per rung; farm.media.ladder) against the same rungs made
as separate transcode jobs would make them (one ffmpeg per segment per rung, each decoding the
segment again), and what that decode costs alone.

Same master, same segments, same rungs and bitrate caps, same preset, one after the other on one
machine in one run. The renditions' sizes are compared too: the two ways must make the same
video (the split changes who decodes, not what is encoded).

`python -m bench.ladder --farm [--quick] [--rounds N]`: the same on a local farm, as users run it:
one `farm submit --ladder A,B,C` job against N `farm submit --resolution WxH` jobs, one per rung,
submitted back to back and waited for together, in rounds of alternating order (ladder then
separate, separate then ladder, ...) so the machine's drift cancels. A transcode job has no
bitrate cap (`--quality` is a CRF): the separate jobs run at the farm's default CRF with the
same sizes, preset, segments and GOP, and each side's bytes are recorded beside its seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from bench import common
from bench.common import LocalFarm, Row
from farm.adapters import proc
from farm.core.spec import Codec, Rung
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings
from farm.media.ladder import ladder_segment_argv, parse_ladder
from farm.media.transcode_graph import SegmentCut

RATE = Fraction(24)
SEGMENT_S = 2


def _timed(argv: list[str]) -> float:
    started = time.monotonic()
    done = proc.capture(argv, 3600)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {done.stderr[-500:]}")
    return time.monotonic() - started


def _master(path: Path, size: str, seconds: int) -> Path:
    """A mezzanine-like master: moving pattern with grain, high-bitrate long-GOP H.264 (its
    decode is a real share of the work, as a master's is)."""
    video = f"testsrc2=s={size}:r={RATE}:d={seconds},noise=alls=12:allf=t"
    _timed(["ffmpeg", *GLOBAL_ARGS, "-f", "lavfi", "-i", video, "-c:v", "libx264", "-preset",
            "veryfast", "-crf", "10", "-g", "48", "-pix_fmt", "yuv420p", str(path)])  # fmt: skip
    return path


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    size, seconds, ladder = ((640, 360), 4, "360p,240p,144p") if quick else (
        (1920, 1080), 10, "1080p,720p,360p")  # fmt: skip
    preset = "veryfast"
    rungs = parse_ladder(ladder, codec=Codec.H264, master_width=size[0], master_height=size[1])
    settings = EncodeSettings(codec="h264", encoder="libx264", fps=RATE, preset=preset)
    total = seconds * int(RATE)
    step = SEGMENT_S * int(RATE)
    cuts = [SegmentCut(first=s, end=min(s + step, total), total=total, rate=RATE, start_pts=0)
            for s in range(0, total, step)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-ladder-") as tmp:
        work = Path(tmp)
        master = _master(work / "master.mp4", f"{size[0]}x{size[1]}", seconds)
        decode_s = _timed(["ffmpeg", *GLOBAL_ARGS, "-i", str(master), "-f", "null", "-"])
        ladder_s = separate_s = 0.0
        ladder_bytes = separate_bytes = 0
        for n, cut in enumerate(cuts):
            outs = [work / f"l{n}-{r}.mp4" for r in range(len(rungs))]
            ladder_s += _timed(ladder_segment_argv(
                ffmpeg_bin="ffmpeg", source=master, outs=[str(o) for o in outs], cut=cut,
                rungs=rungs, settings=settings))  # fmt: skip
            ladder_bytes += sum(o.stat().st_size for o in outs)
            for r, rung in enumerate(rungs):  # as N jobs: each decodes the segment itself
                out = work / f"s{n}-{r}.mp4"
                separate_s += _timed(ladder_segment_argv(
                    ffmpeg_bin="ffmpeg", source=master, outs=[str(out)], cut=cut, rungs=(rung,),
                    settings=settings))  # fmt: skip
                separate_bytes += out.stat().st_size
    ratio = ladder_s / separate_s
    result = {
        "size": f"{size[0]}x{size[1]}",
        "seconds": seconds,
        "ladder": [str(r) for r in rungs],
        "preset": preset,
        "segments": len(cuts),
        "ladder_s": round(ladder_s, 2),
        "separate_s": round(separate_s, 2),
        "ratio": round(ratio, 3),
        "master_decode_s": round(decode_s, 2),
        "decodes_saved_s": round(decode_s * (len(rungs) - 1), 2),
        "ladder_bytes": ladder_bytes,
        "separate_bytes": separate_bytes,
    }
    rows = [
        Row(
            bench="ladder",
            case=f"{len(rungs)} rungs of {size[0]}x{size[1]} {seconds} s, {len(cuts)} segments",
            farm=f"{ladder_s:.1f} s one decode",
            baseline=f"{separate_s:.1f} s {len(rungs)} decodes",
            ratio=ratio,
            note=f"decoding the master once: {decode_s:.1f} s; output bytes "
            f"{ladder_bytes} vs {separate_bytes}",
        )
    ]
    return result, rows


FARM_CASES = {True: ((640, 360), 4, "360p,240p,144p"), False: ((1920, 1080), 10, "1080p,720p,360p")}
"""`--quick` and the full case of the farm mode: master size, seconds, rungs."""
ENDED = frozenset({"done", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class _Job:
    """One job as the bench saw it: its id and how long its `farm submit` took."""

    id: str
    submit_s: float


def _submit(farm: LocalFarm, master: Path, preset: str, *how: str) -> _Job:
    """`farm submit` without --wait: it returns once the job is queued (after the master's probe,
    its scene-cut pass and its upload, which each job does for itself)."""
    started = time.monotonic()
    out = farm.farm("submit", str(master), *how, "--preset", preset,
                    "--segment-frames", str(SEGMENT_S * int(RATE)), "--json")  # fmt: skip
    return _Job(id=json.loads(out.stdout)["id"], submit_s=time.monotonic() - started)


def _wait(farm: LocalFarm, jobs: list[_Job], timeout_s: float = 3600) -> list[dict[str, str]]:
    """Every job's ledger record once all have ended; a job that did not end done fails the bench
    with its error."""
    ledger = farm.ledger()
    deadline = time.monotonic() + timeout_s
    while True:
        records = [ledger.job(j.id) for j in jobs]
        if all(r.get("state") in ENDED for r in records):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs {[j.id for j in jobs]} not ended after {timeout_s:.0f} s")
        time.sleep(0.2)
    for record in records:
        if record["state"] != "done":
            raise RuntimeError(f"job {record['id']} {record['state']}: {record.get('error', '')}")
    return records


def _side(farm: LocalFarm, master: Path, preset: str, hows: list[list[str]]) -> dict[str, Any]:
    """Submit each job back to back, as a user's script would, and wait for all: the wall is from
    the first submit's start to the last job's end (the ledger's `finished`, this machine's
    clock). Worker seconds: each chunk's encode and score, each job's stitch."""
    started = time.time()
    jobs = [_submit(farm, master, preset, *how) for how in hows]
    records = _wait(farm, jobs)
    wall_s = max(float(r["finished"]) for r in records) - started
    ledger, store = farm.ledger(), farm.store()
    encode_s = score_s = stitch_s = 0.0
    rung_bytes: list[int] = []
    ssim: list[float] = []
    for record in records:
        stitch_s += float(record.get("stitch_s") or 0)
        sizes: dict[int, int] = {}  # rendition -> bytes of its segments
        for chunk in ledger.chunks(record["id"]):
            encode_s += float(chunk.get("encode_s") or 0)
            score_s += float(chunk.get("score_s") or 0)
            if chunk.get("ssim"):
                ssim.append(float(chunk["ssim"]))
            manifest = store.get_json(chunk["manifest"])
            for r, part in enumerate(manifest.get("renditions") or [manifest["segment"]]):
                sizes[r] = sizes.get(r, 0) + int(part["size"])
        rung_bytes += [sizes[r] for r in sorted(sizes)]
    return {
        "jobs": [j.id for j in jobs],
        "wall_s": round(wall_s, 2),
        "submit_s": [round(j.submit_s, 2) for j in jobs],
        "encode_s": round(encode_s, 2),
        "score_s": round(score_s, 2),
        "stitch_s": round(stitch_s, 2),
        "worker_s": round(encode_s + score_s + stitch_s, 2),
        "rung_bytes": rung_bytes,
        "ssim_worst": min(ssim) if ssim else None,
    }


def matched_crf(master: Path, rung: Rung, preset: str, work: Path) -> tuple[int, float]:
    """The x264 CRF whose encode of the master's first segment at the rung's size comes nearest
    the rung's bitrate, and that bitrate: what a transcode job, which takes a CRF and no cap, is
    given to match the ladder's rung. From CRF 23 by steps of 6 (x264's rule of thumb: 6 more
    halves the bitrate) until the rung's bitrate lies between two, then bisection: 4 to 6 probes."""
    frames = SEGMENT_S * int(RATE)
    probes: dict[int, float] = {}

    def kbps(crf: int) -> float:
        if crf not in probes:
            out = work / f"crf-{rung.height}-{crf}.mp4"
            _timed(["ffmpeg", *GLOBAL_ARGS, "-i", str(master), "-frames:v", str(frames), "-vf",
                    f"scale=w={rung.width}:h={rung.height}:flags=lanczos,format=yuv420p",
                    "-c:v", "libx264", "-preset", preset, "-crf", str(crf), "-g", str(frames),
                    "-x264opts", "no-scenecut:open-gop=0", "-an", str(out)])  # fmt: skip
            probes[crf] = out.stat().st_size * 8 / 1000 / SEGMENT_S
            out.unlink()
        return probes[crf]

    over, under = -1, 52  # CRFs whose bitrate is above the rung's, and at or under it
    crf = 23
    while under - over > 1:
        if kbps(crf) > rung.bitrate_kbps:
            over = crf
        else:
            under = crf
        wide = over < 0 or under > 51  # not bracketed yet: gallop by 6, else bisect
        crf = (under - 6 if over < 0 else over + 6) if wide else (over + under) // 2
        if not 0 <= crf <= 51 or crf in (over, under):
            break
    best = min(probes, key=lambda c: abs(probes[c] - rung.bitrate_kbps))
    return best, round(probes[best], 1)


def run_farm(
    quick: bool,
    rounds: int = 2,
    farm: LocalFarm | None = None,
    crfs: list[int] | None = None,
) -> tuple[dict[str, Any], list[Row]]:
    """A ladder job against one transcode job per rung on a local farm (`farm`, else one of one
    one-thread worker per core, stopped afterwards), `rounds` times, in alternating order. The
    separate jobs' CRFs: `crfs`, else each matched to its rung's bitrate (matched_crf)."""
    size, seconds, ladder = FARM_CASES[quick]
    preset = "veryfast"
    rungs = parse_ladder(ladder, codec=Codec.H264, master_width=size[0], master_height=size[1])
    with tempfile.TemporaryDirectory(prefix="bench-ladder-farm-") as tmp:
        work = Path(tmp)
        master = _master(work / "master.mp4", f"{size[0]}x{size[1]}", seconds)
        decode_s = _timed(["ffmpeg", *GLOBAL_ARGS, "-i", str(master), "-f", "null", "-"])
        own = farm is None
        farm = farm or common.start_farm(workers=os.cpu_count() or 1, base=work / "farm")
        try:
            ladder_how = [["--ladder", ladder]]
            chosen = [(c, 0.0) for c in crfs] if crfs else [
                matched_crf(master, r, preset, work) for r in rungs]  # fmt: skip
            separate_how = [["--resolution", f"{r.width}x{r.height}", "--quality", str(crf)]
                            for r, (crf, _) in zip(rungs, chosen, strict=True)]  # fmt: skip
            runs: list[dict[str, Any]] = []
            for n in range(rounds):
                first_ladder = n % 2 == 0  # ladder, separate | separate, ladder | ...
                order = ("ladder", "separate") if first_ladder else ("separate", "ladder")
                done = {name: _side(farm, master, preset,
                                    ladder_how if name == "ladder" else separate_how)
                        for name in order}  # fmt: skip
                runs.append({"round": n + 1, "order": list(order), **done,
                             "ratio": round(done["ladder"]["wall_s"] / done["separate"]["wall_s"], 3),
                             "load_avg_1m": round(os.getloadavg()[0], 2)})  # fmt: skip
            workers = farm.workers
        finally:
            if own:
                farm.close()
    return _farm_summary(size, seconds, rungs, chosen, preset, decode_s, workers, runs)


def _farm_summary(
    size: tuple[int, int],
    seconds: int,
    rungs: tuple[Rung, ...],
    crfs: list[tuple[int, float]],
    preset: str,
    decode_s: float,
    workers: int,
    runs: list[dict[str, Any]],
) -> tuple[dict[str, Any], list[Row]]:
    ratios = sorted(r["ratio"] for r in runs)
    median = statistics.median(ratios)
    ladder_wall = statistics.median(r["ladder"]["wall_s"] for r in runs)
    separate_wall = statistics.median(r["separate"]["wall_s"] for r in runs)
    work = {side: {part: statistics.median(r[side][part] for r in runs)
                   for part in ("worker_s", "encode_s", "score_s", "stitch_s")}
            for side in ("ladder", "separate")}  # fmt: skip
    submit = {side: statistics.median(sum(r[side]["submit_s"]) for r in runs)
              for side in ("ladder", "separate")}  # fmt: skip
    n = len(rungs)
    result = {
        "size": f"{size[0]}x{size[1]}",
        "seconds": seconds,
        "ladder": [str(r) for r in rungs],
        "separate": [
            f"{r.width}x{r.height} crf {crf}"
            + (f" ({kbps} kbit/s on the first segment)" if kbps else " (given)")
            for r, (crf, kbps) in zip(rungs, crfs, strict=True)
        ],
        "preset": preset,
        "segment_frames": SEGMENT_S * int(RATE),
        "workers": workers,
        "master_decode_s": round(decode_s, 2),
        "rounds": runs,
        "ratio_min": ratios[0],
        "ratio_median": round(median, 3),
        "ratio_max": ratios[-1],
        "worker_s_median": work,
        "submit_s_median": submit,
    }
    bytes_l, bytes_s = runs[-1]["ladder"]["rung_bytes"], runs[-1]["separate"]["rung_bytes"]
    matched = "matched to the rungs' bitrates" if crfs[0][1] else "given"
    parts = ", ".join(f"{part[:-2]} {work['ladder'][part]:.1f} vs {work['separate'][part]:.1f} s"
                      for part in ("encode_s", "score_s", "stitch_s"))  # fmt: skip
    case = f"farm: {n} rungs of {size[0]}x{size[1]} {seconds} s, one job vs {n} jobs"
    rows = [
        Row(
            bench="ladder",
            case=case + f", median of {len(runs)} rounds",
            farm=f"{ladder_wall:.1f} s (--ladder, {workers} workers, submit to done)",
            baseline=f"{separate_wall:.1f} s ({n} --resolution --quality jobs, submitted together)",
            ratio=median,
            note=f"wall ratio min {ratios[0]:.2f} / median {median:.2f} / max {ratios[-1]:.2f}; "
            f"submits {submit['ladder']:.1f} s vs {submit['separate']:.1f} s (each probes, "
            f"finds scene cuts, uploads); decoding the master once: {decode_s:.1f} s, "
            f"x{n - 1} saved; a transcode job takes a CRF, no bitrate cap: CRF "
            f"{'/'.join(str(c) for c, _ in crfs)} {matched}; bytes per rung {bytes_l} vs {bytes_s}",
        ),
        Row(
            bench="ladder",
            case=case + ": worker seconds (encode + score + stitch)",
            farm=f"{work['ladder']['worker_s']:.1f} s",
            baseline=f"{work['separate']['worker_s']:.1f} s",
            ratio=work["ladder"]["worker_s"] / work["separate"]["worker_s"],
            note=f"medians over rounds, ladder vs separate: {parts} (the chunks' encode_s and "
            "score_s, the jobs' stitch_s)",
        ),
    ]
    return result, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ladder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--farm", action="store_true", help="jobs on a local farm")
    parser.add_argument("--quick", action="store_true", help="640x360 4 s master, 3 small rungs")
    parser.add_argument("--rounds", type=int, default=2, help="--farm: rounds, order alternating")
    parser.add_argument("--out", type=Path, default=common.ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"machine": common.machine(), "quick": args.quick,
                               "started": time.time()}  # fmt: skip
    name = "ladder_farm" if args.farm else "ladder"
    found, rows = run_farm(args.quick, args.rounds) if args.farm else run(args.quick)
    results[name] = {**found, "load_avg_1m_after": round(os.getloadavg()[0], 2)}
    results["rows"] = [{k: getattr(r, k) for k in ("bench", "case", "farm", "baseline", "ratio",
                                                   "note")} for r in rows]  # fmt: skip
    results["finished"] = time.time()
    path = args.out / time.strftime("bench-%Y%m%d-%H%M%S.json")
    common.dump(path, results)
    print("| case | farm | baseline | ratio | note |\n|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else ""
        print(f"| {r.case} | {r.farm} | {r.baseline} | {ratio} | {r.note} |")
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
