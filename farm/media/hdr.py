"""HDR masters: reading their signalling with ffprobe (parsing is pure), and the encoder options
and filters that carry it into every segment, or tone-map it to SDR BT.709 (pure).

What Debian 12's ffmpeg 5.1 allows, per encoder (docs/design/hdr.md):
- libx265 writes the colour tags and, through x265-params, HDR10's SEI (mastering display,
  content light level) in every keyframe's headers (repeat-headers), so each segment has them.
- libsvtav1 (SVT-AV1 1.4) writes both as AV1 metadata OBUs from svtav1-params
  (mastering-display, content-light); HDR needs 10 bits, so an HDR AV1 job encodes 10-bit.
- hevc_nvenc in 5.1 reads neither from options nor from frame side data (a later ffmpeg, 7.1
  by our reading, passes them), and hevc_metadata cannot add SEI: a master with static
  metadata encodes in software.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from farm.adapters.sandbox import Box
from farm.core.errors import PermanentError, SpecError
from farm.core.hdr import DOLBY_VISION, HDR10_PLUS, PQ, HdrInfo, MasteringDisplay
from farm.media import probe

CHROMA_UNITS = 50000
LUMA_UNITS = 10000
DYNAMIC_SIDE_DATA = {
    "HDR Dynamic Metadata SMPTE2094-40 (HDR10+)": HDR10_PLUS,
    "DOVI configuration record": DOLBY_VISION,
    "Dolby Vision RPU Data": DOLBY_VISION,
    "Dolby Vision Metadata": DOLBY_VISION,
}
"""ffprobe's names for side data the farm cannot carry, frame or stream."""
X265_TRANSFERS = {"gamma22": "bt470m", "gamma28": "bt470bg"}
"""ffprobe's transfer names that x265 spells otherwise (the rest are the same)."""


def _units(value: object, units: int) -> int:
    return round(Fraction(str(value)) * units)


def mastering_display(side: dict[str, Any]) -> MasteringDisplay | None:
    """ffprobe's "Mastering display metadata" (fractions such as 34000/50000), or None when it
    lacks the primaries or the luminance (ffprobe leaves out what the master does not set)."""
    try:
        pair = [
            (_units(side[f"{c}_x"], CHROMA_UNITS), _units(side[f"{c}_y"], CHROMA_UNITS))
            for c in ("red", "green", "blue", "white_point")
        ]
        return MasteringDisplay(
            red=pair[0], green=pair[1], blue=pair[2], white=pair[3],
            max_luminance=_units(side["max_luminance"], LUMA_UNITS),
            min_luminance=_units(side["min_luminance"], LUMA_UNITS),
        )  # fmt: skip
    except (KeyError, ValueError, ZeroDivisionError):
        return None


def parse_hdr(text: str) -> HdrInfo | None:
    """`side_data_argv`'s answer -> the master's HDR signalling; None for an SDR master (no PQ or
    HLG transfer, no static or dynamic metadata)."""
    data = json.loads(text or "{}")
    frame: dict[str, Any] = next(iter(data.get("frames") or []), {})
    stream: dict[str, Any] = next(iter(data.get("streams") or []), {})
    sides = [*(frame.get("side_data_list") or []), *(stream.get("side_data_list") or [])]
    by_type: dict[str, dict[str, Any]] = {}
    for side in sides:
        by_type.setdefault(str(side.get("side_data_type", "")), side)
    dynamic = sorted({name for kind, name in DYNAMIC_SIDE_DATA.items() if kind in by_type})
    light = by_type.get("Content light level metadata")

    def tag(name: str) -> str:
        value = str(frame.get(name) or stream.get(name) or "")
        return "" if value in ("unknown", "unspecified", "reserved") else value

    hdr = HdrInfo(
        primaries=tag("color_primaries"),
        transfer=tag("color_transfer"),
        matrix=tag("color_space"),
        range=tag("color_range") or "tv",
        mastering=mastering_display(by_type.get("Mastering display metadata") or {}),
        max_cll=int(light["max_content"]) if light else None,
        max_fall=int(light["max_average"]) if light else None,
        dynamic=tuple(dynamic),
    )
    return hdr if hdr.is_hdr or dynamic else None


def x265_hdr_params(hdr: HdrInfo) -> list[str]:
    """x265-params that tag the stream and write HDR10's SEI in every keyframe's headers."""
    params = [
        f"{name}={value}"
        for name, value in (
            ("colorprim", hdr.primaries),
            ("transfer", X265_TRANSFERS.get(hdr.transfer, hdr.transfer)),
            ("colormatrix", hdr.matrix),
        )
        if value
    ]
    if hdr.mastering is not None:
        m = hdr.mastering
        params.append(
            f"master-display=G{m.green}B{m.blue}R{m.red}WP{m.white}"
            f"L({m.max_luminance},{m.min_luminance})".replace(" ", "")
        )
    if hdr.max_cll is not None:
        params.append(f"max-cll={hdr.max_cll},{hdr.max_fall or 0}")
    if hdr.transfer == PQ:
        params += ["hdr10=1", "hdr10-opt=1"]
    if hdr.static:
        params.append("repeat-headers=1")
    return params


def _chroma(pair: tuple[int, int]) -> str:
    return f"({pair[0] / CHROMA_UNITS:.5f},{pair[1] / CHROMA_UNITS:.5f})"


def svtav1_hdr_params(hdr: HdrInfo) -> list[str]:
    """svtav1-params for HDR10's metadata OBUs (SVT-AV1 takes floats: x,y and cd/m2)."""
    params = []
    if hdr.mastering is not None:
        m = hdr.mastering
        params.append(
            f"mastering-display=G{_chroma(m.green)}B{_chroma(m.blue)}R{_chroma(m.red)}"
            f"WP{_chroma(m.white)}L({m.max_luminance / LUMA_UNITS:.4f},"
            f"{m.min_luminance / LUMA_UNITS:.4f})"
        )
    if hdr.max_cll is not None:
        params.append(f"content-light={hdr.max_cll},{hdr.max_fall or 0}")
    return params


def colour_options(hdr: HdrInfo | None) -> dict[str, object]:
    """The output's colour tags: the master's when HDR is kept, BT.709 when tone-mapped."""
    if hdr is None:
        return {}
    if hdr.tonemap:
        return {"color_primaries": "bt709", "color_trc": "bt709", "colorspace": "bt709"}
    tags = {"color_primaries": hdr.primaries, "color_trc": hdr.transfer, "colorspace": hdr.matrix}
    return {k: v for k, v in tags.items() if v}


def tonemap_filters(hdr: HdrInfo | None) -> list[str]:
    """HDR (PQ or HLG) to SDR BT.709 with zscale (libzimg, in Debian's ffmpeg) and the tonemap
    filter: linear light at 100 cd/m2, BT.709 primaries, Hable's curve, then BT.709 video."""
    if hdr is None or not hdr.tonemap:
        return []
    src = f"tin={hdr.transfer or PQ}:pin={hdr.primaries or 'bt2020'}:min={hdr.matrix or 'bt2020nc'}"
    return [
        f"zscale={src}:rin={hdr.range}:t=linear:npl=100",
        "format=gbrpf32le",
        "zscale=p=bt709",
        "tonemap=tonemap=hable:desat=0",
        "zscale=t=bt709:m=bt709:r=tv",
    ]


def probe_hdr(ffprobe: str, path: Path, box: Box | None = None) -> HdrInfo | None:
    """The master's HDR signalling at submit, read as probe_master reads it (its file alone, in
    `box`); a master whose first frame ffprobe cannot show is refused."""
    source = probe.input_name(path)
    argv = probe.side_data_argv(ffprobe, source, probe.MASTER_FORMATS)
    shown = probe.submit_capture(argv, 120, box, path.name)
    if shown.returncode != 0:
        reason = (shown.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise SpecError(f"{path.name}: ffprobe cannot read its first frame's colour ({reason})")
    return parse_hdr(shown.stdout)


def read_hdr(ffprobe: str, path: Path, box: Box | None = None) -> HdrInfo | None:
    """A file this farm made (a deliverable), read as `probe_hdr` reads a master; unreadable is
    a permanent error."""
    argv = probe.side_data_argv(ffprobe, probe.input_name(path), probe.farm_formats(path))
    shown = probe.capture(argv, 120, box)
    if shown.returncode != 0:
        raise PermanentError(f"ffprobe cannot read {path.name}: {shown.stderr.strip()[-300:]}")
    return parse_hdr(shown.stdout)


def hdr_problems(want: HdrInfo, got: HdrInfo | None) -> list[str]:
    """How the output's first frame falls short of the job's HDR choice, in a user's words ([]:
    it does not). Kept: the master's tags, and its static metadata within one unit (AV1 stores
    it in its own fixed point). Tone-mapped: BT.709 and no HDR metadata."""
    if want.tonemap:
        if got is not None and (got.is_hdr or got.transfer not in ("", "bt709")):
            return [f"it was to be tone-mapped to BT.709 but is {got.transfer or 'untagged'}"]
        return []
    if got is None:
        return [f"its first frame has lost the master's HDR ({want.transfer} and its metadata)"]
    problems = [
        f"{what} {theirs or 'unset'}, the master's {mine}"
        for what, mine, theirs in (
            ("colour primaries", want.primaries, got.primaries),
            ("transfer", want.transfer, got.transfer),
            ("matrix", want.matrix, got.matrix),
        )
        if mine and mine != theirs
    ]
    if want.mastering is not None and not _near(want.mastering, got.mastering):
        problems.append(f"mastering display {got.mastering}, the master's {want.mastering}")
    if (want.max_cll, want.max_fall) != (None, None) and (want.max_cll, want.max_fall) != (
        got.max_cll,
        got.max_fall,
    ):
        problems.append(
            f"content light level {got.max_cll},{got.max_fall}, the master's "
            f"{want.max_cll},{want.max_fall}"
        )
    return problems


def _near(want: MasteringDisplay, got: MasteringDisplay | None) -> bool:
    if got is None:
        return False
    pairs = zip(
        (*want.red, *want.green, *want.blue, *want.white),
        (*got.red, *got.green, *got.blue, *got.white),
        strict=True,
    )
    luminance_ok = (
        abs(want.max_luminance - got.max_luminance) <= max(2, want.max_luminance // 10000)
        and abs(want.min_luminance - got.min_luminance) <= 2
    )
    return luminance_ok and all(abs(a - b) <= 2 for a, b in pairs)
