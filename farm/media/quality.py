"""A segment's quality against its source frames (SSIM and PSNR, ffmpeg's filters, and VMAF where
the job asks, libvmaf's), and the search of a chunk's CRF/CQ for `--target-quality` on short
probes, as Av1an does (pure).

The reference is the master cut and scaled exactly as the segment's own filtergraph cuts it
(farm.media.transcode_graph.segment_filtergraph, on the CPU), in the segment's pixel format, so
the score measures the encode alone, not the scale. Debian's ffmpeg 5.1 has no libvmaf: a VMAF
score runs on a second ffmpeg that has it (Settings.vmaf_ffmpeg, docs/design/quality.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from farm.core.errors import SpecError
from farm.core.hdr import HdrInfo
from farm.core.spec import Rung
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings
from farm.media.ladder import ladder_filtergraph
from farm.media.probe import FARM_FORMATS, MASTER_FORMATS, input_name, option_args, whitelists
from farm.media.transcode_graph import SegmentCut, segment_filtergraph

METRICS = ("ssim", "psnr", "vmaf")
"""What `--target-quality` takes; `vmaf` needs the workers' libvmaf (Settings.vmaf_ffmpeg)."""
TARGET_RANGE = {"ssim": (0.5, 0.9999), "psnr": (20.0, 70.0), "vmaf": (20.0, 99.0)}
SCORE_EVERY = 1
"""Score every frame: the decodes dominate the cost, which subsampling cannot save (quality.md)."""
PROBE_SAMPLES = 3
PROBE_FRAMES_S = 1.0
"""Each probe encodes up to PROBE_SAMPLES windows of the chunk, about a second each."""
MAX_PROBES = 4
STEP = 6
"""How far the search steps from the default CRF/CQ before it has a score on each side."""

_SSIM = re.compile(r"SSIM Y:[\d.]+ .*All:([\d.]+|inf)")
_PSNR = re.compile(r"PSNR y:\S+ u:\S+ v:\S+ average:([\d.]+|inf)")
_VMAF = re.compile(r"VMAF score: ([\d.]+)")
VMAF_MODEL = "vmaf_v0.6.1"
"""libvmaf's model for HD: a 1080p display viewed from three times its height."""
VMAF_4K_MODEL = "vmaf_4k_v0.6.1"
"""libvmaf's model for 4K: a 2160p display viewed from 1.5 times its height, where an encode's
softness shows less; both are built into libvmaf, so no model file travels."""
PSNR_CAP_DB = 100.0
"""Identical frames score PSNR `inf`; kept as 100 dB so JSON and metrics hold a number."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Score:
    """One segment's score: mean SSIM (all planes, 0..1) and average PSNR (dB) over its frames,
    and where the job asked, the mean VMAF (0..100, libvmaf's vmaf_v0.6.1 model)."""

    ssim: float
    psnr_db: float
    frames: int
    vmaf: float | None = None
    vmaf_model: str = ""
    """The libvmaf model that scored `vmaf` (vmaf_model)."""

    def fields(self) -> dict[str, object]:
        """The chunk's ledger fields and the manifest's `quality`."""
        vmaf = (
            {}
            if self.vmaf is None
            else {"vmaf": round(self.vmaf, 3), "vmaf_model": self.vmaf_model or VMAF_MODEL}
        )
        return {"ssim": round(self.ssim, 6), "psnr_db": round(self.psnr_db, 3), **vmaf}

    def value(self, metric: str) -> float:
        if metric == "vmaf":
            assert self.vmaf is not None, "a vmaf target scores VMAF"
            return self.vmaf
        return self.ssim if metric == "ssim" else self.psnr_db


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """`--target-quality ssim=0.98`: the metric and the score each chunk must reach."""

    metric: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric}={self.value:g}"

    def met(self, score: float) -> bool:
        return score >= self.value


def parse_target(text: str) -> Target:
    """`ssim=0.98`, `psnr=40` or `vmaf=95`; SpecError with what to write instead."""
    metric, sep, raw = text.strip().lower().partition("=")
    try:
        value = float(raw) if sep else float("nan")
    except ValueError:
        value = float("nan")
    if metric not in METRICS or value != value:
        raise SpecError(f"--target-quality {text!r}: write ssim=0.98, psnr=40 or vmaf=95")
    low, high = TARGET_RANGE[metric]
    if not low <= value <= high:
        raise SpecError(f"--target-quality {text}: {metric} takes {low:g} to {high:g}")
    return Target(metric=metric, value=value)


def score_argv(
    *,
    ffmpeg_bin: str,
    segment: Path,
    source: Path,
    cut: SegmentCut,
    width: int,
    height: int,
    pix_fmt: str,
    hdr: HdrInfo | None = None,
    every: int = SCORE_EVERY,
    vmaf_threads: int = 0,
) -> list[str]:
    """SSIM and PSNR of `segment` against the master's frames [first, end), cut and scaled as
    the segment's graph does (on the CPU), in `pix_fmt`; each frame renumbered 0.. on both
    sides so the filters pair them by position. `every` > 1 scores every Nth frame only.
    `vmaf_threads` > 0: VMAF too, libvmaf on that many threads (`ffmpeg_bin` must have it);
    libvmaf takes the distorted frames first and the reference second, as ssim and psnr do. The
    summaries are read from stderr (`parse_score`); the segment is read as an MP4 alone, the
    master in a master's container alone."""
    seg_name, src_name = input_name(segment), input_name(source)
    reading = option_args(whitelists(src_name, MASTER_FORMATS))
    if cut.seek_s > 0:  # the segment's own seek, to a keyframe before its first frame
        reading += ["-noaccurate_seek", "-ss", f"{cut.seek_s:.6f}"]
    tb = f"{cut.rate.denominator}/{cut.rate.numerator}"
    pick = [rf"select=not(mod(n\,{every}))"] if every > 1 else []
    same = [*pick, f"settb=expr={tb}", "setpts=N"]
    sinks = ["ssim[ms]", "psnr[mp]"]
    if vmaf_threads > 0:
        model = vmaf_model(width, height)
        sinks.append(f"libvmaf=model=version={model}:n_threads={vmaf_threads}[mv]")
    split = "split" if len(sinks) == 2 else f"split={len(sinks)}"
    graph = (
        f"[0:v:0]{','.join([f'format={pix_fmt}', *same])},{split}"
        f"{''.join(f'[m{n}]' for n in range(len(sinks)))};"
        f"[1:v:0]{segment_filtergraph(cut, width, height, False, pix_fmt, hdr)},"
        f"{','.join(same)},{split}{''.join(f'[r{n}]' for n in range(len(sinks)))};"
        + ";".join(f"[m{n}][r{n}]{sink}" for n, sink in enumerate(sinks))
    )
    maps = [arg for sink in sinks for arg in ("-map", sink[sink.rindex("[") :])]
    # By hand: ffmpeg-python maps every stream of every input (the master's audio too) when a
    # graph goes in with -filter_complex, and it cannot write -map of a graph's labels.
    return [
        ffmpeg_bin, *GLOBAL_ARGS[:2], "-loglevel", "info", "-nostats", "-copyts",
        *option_args(whitelists(seg_name, FARM_FORMATS)), "-i", seg_name,
        *reading, "-i", src_name,
        "-filter_complex", graph, *maps, "-f", "null", "-",
    ]  # fmt: skip


def parse_score(stderr: str, frames: int, *, vmaf: bool = False) -> Score:
    """The ssim and psnr filters' summaries (ffmpeg 5.1 and 9 write them at the info level):
    `SSIM Y:0.99 (20.1) U:... All:0.987 (18.9)` and `PSNR y:.. u:.. v:.. average:41.2 ...`;
    with `vmaf`, libvmaf's `VMAF score: 93.2` (the mean over frames). ValueError when one is
    missing (the run failed before its end)."""
    ssim, psnr = _SSIM.search(stderr), _PSNR.search(stderr)
    if ssim is None or psnr is None:
        raise ValueError(f"no SSIM/PSNR summary in ffmpeg's output: {stderr.strip()[-300:]!r}")
    found = _VMAF.search(stderr) if vmaf else None
    if vmaf and found is None:
        raise ValueError(f"no VMAF score in ffmpeg's output: {stderr.strip()[-300:]!r}")
    psnr_db = PSNR_CAP_DB if psnr.group(1) == "inf" else min(float(psnr.group(1)), PSNR_CAP_DB)
    ssim_v = 1.0 if ssim.group(1) == "inf" else float(ssim.group(1))
    vmaf_v = float(found.group(1)) if found is not None else None
    return Score(ssim=ssim_v, psnr_db=psnr_db, frames=frames, vmaf=vmaf_v)


def renditions_score_argv(
    *,
    ffmpeg_bin: str,
    renditions: list[Path],
    source: Path,
    cut: SegmentCut,
    rungs: tuple[Rung, ...],
    settings: EncodeSettings,
    pix_fmt: str,
) -> list[str]:
    """SSIM and PSNR of each rendition of a ladder segment against the master's frames, decoded
    once and cut, split and scaled to each rung as the ladder's own graph does
    (farm.media.ladder.ladder_filtergraph, on the CPU). Each rung's filters are named
    `ssim@rK` / `psnr@rK` so `parse_scores` tells their summaries apart."""
    assert len(renditions) == len(rungs), "one rendition per rung"
    src_name = input_name(source)
    reading = option_args(whitelists(src_name, MASTER_FORMATS))
    if cut.seek_s > 0:
        reading += ["-noaccurate_seek", "-ss", f"{cut.seek_s:.6f}"]
    tb = f"{cut.rate.denominator}/{cut.rate.numerator}"
    same = f"settb=expr={tb},setpts=N"
    parts = [ladder_filtergraph(cut, rungs, False, settings, pix_fmt)]
    inputs: list[str] = []
    maps: list[str] = []
    for n, rendition in enumerate(renditions):
        name = input_name(rendition)
        inputs += [*option_args(whitelists(name, FARM_FORMATS)), "-i", name]
        parts += [
            f"[r{n}]{same},split[r{n}a][r{n}b]",
            f"[{n + 1}:v:0]format={pix_fmt},{same},split[m{n}a][m{n}b]",
            f"[m{n}a][r{n}a]ssim@r{n}[q{n}];[m{n}b][r{n}b]psnr@r{n}[p{n}]",
        ]
        maps += ["-map", f"[q{n}]", "-map", f"[p{n}]"]
    # By hand, as score_argv: a graph's labels cannot be mapped through ffmpeg-python.
    return [
        ffmpeg_bin, *GLOBAL_ARGS[:2], "-loglevel", "info", "-nostats", "-copyts",
        *reading, "-i", src_name, *inputs,
        "-filter_complex", ";".join(parts), *maps, "-f", "null", "-",
    ]  # fmt: skip


def parse_scores(stderr: str, frames: int, count: int) -> list[Score]:
    """Each rung's summaries from `renditions_score_argv`'s run, rung 0 first (`[ssim@r0 @ 0x..]
    SSIM ...`). ValueError naming the first rung without both."""
    scores = []
    for n in range(count):
        ssim = re.search(rf"\[ssim@r{n} @ [^\]]*\] {_SSIM.pattern}", stderr)
        psnr = re.search(rf"\[psnr@r{n} @ [^\]]*\] {_PSNR.pattern}", stderr)
        if ssim is None or psnr is None:
            raise ValueError(f"no SSIM/PSNR summary for rendition {n}: {stderr.strip()[-300:]!r}")
        scores.append(parse_score(f"{ssim.group(0)}\n{psnr.group(0)}", frames))
    return scores


def probe_cuts(cut: SegmentCut, samples: int = PROBE_SAMPLES) -> list[SegmentCut]:
    """Up to `samples` windows of about PROBE_FRAMES_S each, spread evenly over the chunk; the
    whole chunk when it is no longer than them. Each keeps the chunk's seek point."""
    length = max(1, round(float(cut.rate) * PROBE_FRAMES_S))
    if cut.count <= samples * length:
        return [cut]
    gap = (cut.count - samples * length) // samples
    starts = [cut.first + gap // 2 + n * (length + gap) for n in range(samples)]
    return [
        SegmentCut(first=s, end=s + length, total=cut.total, rate=cut.rate,
                   start_pts=cut.start_pts, seek_s=cut.seek_s)
        for s in starts
    ]  # fmt: skip


def next_probe(
    tried: dict[int, float], target: Target, start: int, top: int, bottom: int = 0
) -> int | None:
    """The next CRF/CQ to probe, or None when the search has its answer: the highest value
    (the smallest encode) whose score meets `target`, within `bottom`..`top`. From `start`, it
    steps by STEP until it has a passing and a failing value, then interpolates the score
    linearly between the closest two (rounded down: to the better side), as Av1an does; at most
    MAX_PROBES probes."""
    if not tried:
        return start
    if len(tried) >= MAX_PROBES:
        return None
    passing = [q for q, s in tried.items() if target.met(s)]
    good = max(passing, default=bottom - 1)
    failing = [q for q, s in tried.items() if not target.met(s) and q > good]
    bad = min(failing, default=top + 1)
    if bad - good <= 1:
        return None
    if good < bottom:
        return max(bottom, bad - STEP)
    if bad > top:
        return min(top, good + STEP)
    s_good, s_bad = tried[good], tried[bad]
    guess = good + (bad - good) * (s_good - target.value) / max(s_good - s_bad, 1e-9)
    return min(max(int(guess), good + 1), bad - 1)


def chosen(tried: dict[int, float], target: Target) -> tuple[int, bool]:
    """The value the search settled on and whether it meets the target: the highest passing,
    else the lowest tried (the best quality it saw; the chunk is encoded there and flagged)."""
    passing = [q for q, s in tried.items() if target.met(s)]
    return (max(passing), True) if passing else (min(tried), False)


def vmaf_model(width: int, height: int) -> str:
    """The VMAF model for an output of this size: the 4K model from 3840x2160 (either side), the
    HD model below it, as Netflix trained them (docs/design/quality.md)."""
    return VMAF_4K_MODEL if width >= 3840 or height >= 2160 else VMAF_MODEL


SCORES = ("ssim", "vmaf", "none")
"""What `--score` takes: SSIM and PSNR (the default), VMAF too, or no scoring pass."""


def wants_vmaf(target: str | None, score: str) -> bool:
    """Whether a job's segments are scored for VMAF: `--score vmaf`, or a `vmaf=` target."""
    return score == "vmaf" or (target or "").strip().lower().startswith("vmaf")


def score_choice(score: str | None, target: str | None, *, ladder: bool, missing: str) -> str:
    """`--score` checked against the job and the farm, as the spec keeps it: `ssim` when not
    given, `vmaf` under a `vmaf=` target (its segments are scored for VMAF too). `missing`: why
    this farm has no libvmaf ('' when it has it), asked only where VMAF is. SpecError with what
    to do."""
    score = score or "ssim"
    if score not in SCORES:
        raise SpecError(f"--score {score!r}: choose one of {', '.join(SCORES)}")
    if score == "none" and target:
        raise SpecError(
            f"--score none with --target-quality {target}: the target's search scores each "
            "chunk's probes; leave one of them out"
        )
    if not wants_vmaf(target, score):
        return score
    asked = "--score vmaf" if score == "vmaf" else f"--target-quality {target}"
    if ladder and score == "vmaf":
        raise SpecError(
            "--score vmaf with --ladder: a ladder's renditions are scored for SSIM and PSNR "
            "only; leave --score vmaf out"
        )
    if missing:
        raise SpecError(
            f"{asked}: this farm has no VMAF ({missing}); install imageio-ffmpeg>=0.8.1 (its "
            "ffmpeg has libvmaf) or set FARM_VMAF_FFMPEG to an ffmpeg built --enable-libvmaf, "
            "or score with ssim=0.98 or psnr=40 instead"
        )
    return "vmaf"


def target_choice(text: str | None, *, quality: int | None, prores: bool, ladder: bool) -> str:
    """`--target-quality` checked against the job's other settings, written as the spec keeps it
    (`ssim=0.98`); '' when not given. SpecError with what to do. Whether the farm can score a
    `vmaf=` target is score_choice's."""
    if not text:
        return ""
    target = parse_target(text)
    if prores:
        raise SpecError("--target-quality: ProRes 422 HQ has no CRF to search; leave it out")
    if quality is not None:
        raise SpecError(
            f"--quality {quality} and --target-quality {text}: the target chooses each chunk's "
            "CRF/CQ; give one of them"
        )
    if ladder:
        raise SpecError(
            f"--target-quality {text} with --ladder: the ladder's renditions are encoded at "
            "their bitrates; give one of them"
        )
    return str(target)
