"""What an encode job does with an HDR master, decided at submit (pure): keep its colour tags and
HDR10 static metadata, tone-map it to SDR (--tonemap), or refuse it naming what the farm cannot
carry and what to do. Nothing HDR is flattened silently."""

from __future__ import annotations

from dataclasses import replace

from farm.core.errors import SpecError
from farm.core.hdr import DOLBY_VISION, HDR10_PLUS, HDR_TRANSFERS, HdrInfo
from farm.core.spec import Codec, EncoderChoice, JobSpec

HDR_CODECS = (Codec.HEVC10, Codec.AV1)
"""Codecs that carry an HDR master: 10-bit HEVC (libx265), AV1 (SVT-AV1, 10-bit for HDR)."""


def hdr_choice(
    name: str,
    hdr: HdrInfo | None,
    codec: Codec,
    encoder: EncoderChoice,
    *,
    tonemap: bool,
    drop_dynamic_hdr: bool,
) -> HdrInfo | None:
    """What the job does with an HDR master: keep its tags and static metadata, or tone-map to
    SDR (--tonemap); SpecError for what the farm cannot carry (dynamic metadata, HDR in an
    SDR-only codec, HDR10's SEI on NVENC), saying what to do. Never flattened silently."""
    if hdr is None or not (hdr.is_hdr or hdr.dynamic):
        if tonemap:
            raise SpecError(f"--tonemap: {name} is not HDR (no PQ or HLG transfer); leave it out")
        if drop_dynamic_hdr:
            raise SpecError(f"--drop-dynamic-hdr: {name} has no dynamic HDR metadata; leave it out")
        return None
    if hdr.dynamic and not drop_dynamic_hdr:
        found = " and ".join(hdr.dynamic)
        raise SpecError(
            f"{name} carries {found} dynamic HDR metadata, which the farm cannot carry into its "
            "segments. Submit with --drop-dynamic-hdr to deliver HDR10 (its colour tags and "
            "static metadata kept, the dynamic metadata dropped), or with --tonemap for SDR"
        )
    if not hdr.dynamic and drop_dynamic_hdr:
        raise SpecError(f"--drop-dynamic-hdr: {name} has no dynamic HDR metadata; leave it out")
    if tonemap:
        if hdr.transfer not in HDR_TRANSFERS:
            raise SpecError(
                f"--tonemap: {name}'s transfer is {hdr.transfer or 'unset'}, not PQ or HLG, so "
                "there is no curve to map from; tag the master (smpte2084 or arib-std-b67) first"
            )
        return replace(hdr, tonemap=True)
    if codec not in HDR_CODECS:
        raise SpecError(
            f"{name} is HDR ({hdr.transfer or 'with HDR10 metadata'}, {hdr.primaries or 'no primaries'}"
            f"); --codec {codec} is SDR only and would play it washed out. Submit with "
            "--codec hevc10 (or av1) to keep it HDR, or with --tonemap for an SDR BT.709 output"
        )
    if hdr.static and encoder is EncoderChoice.NVENC:
        raise SpecError(
            f"--encoder nvenc: {name} has HDR10 static metadata (mastering display, content "
            "light level), which this farm's ffmpeg cannot write with NVENC; submit with "
            "--encoder auto or software (libx265 / SVT-AV1 keep it)"
        )
    return hdr


def hdr_note(spec: JobSpec) -> str:
    """What to tell the user about an HDR master, or ''."""
    hdr = spec.master.hdr if spec.master else None
    if hdr is None:
        return ""
    if hdr.tonemap:
        return f"note: {spec.source_name} is HDR; the output is tone-mapped to SDR BT.709"
    kept = "colour tags" + (" and HDR10 static metadata" if hdr.static else "")
    said = f"note: {spec.source_name} is HDR ({hdr.transfer}); its {kept} are kept"
    if hdr.dynamic:
        said += (
            f"; its {' and '.join(hdr.dynamic)} dynamic metadata is dropped (--drop-dynamic-hdr)"
        )
    return said


PRIMARIES = frozenset(
    [
        "bt709",
        "bt470m",
        "bt470bg",
        "smpte170m",
        "smpte240m",
        "film",
        "bt2020",
        "smpte428",
        "smpte431",
        "smpte432",
    ]
)
TRANSFERS = frozenset(
    [
        "bt709",
        "gamma22",
        "gamma28",
        "smpte170m",
        "smpte240m",
        "linear",
        "log100",
        "log316",
        "iec61966-2-4",
        "bt1361e",
        "iec61966-2-1",
        "bt2020-10",
        "bt2020-12",
        "smpte2084",
        "smpte428",
        "arib-std-b67",
    ]
)
MATRICES = frozenset(
    [
        "gbr",
        "bt709",
        "fcc",
        "bt470bg",
        "smpte170m",
        "smpte240m",
        "ycgco",
        "bt2020nc",
        "bt2020c",
        "smpte2085",
        "chroma-derived-nc",
        "chroma-derived-c",
        "ictcp",
    ]
)
"""ffprobe's names for the colour tags the encoders and zscale are given; nothing else reaches
an ffmpeg option or filter graph."""
DYNAMIC = frozenset({HDR10_PLUS, DOLBY_VISION})


def check_recorded(hdr: HdrInfo, codec: Codec, encoder: EncoderChoice) -> None:
    """A spec's HDR record as the API receives it (the client built it): every name one ffmpeg
    knows and every number in range, so none can reach an encoder's options or the filter graph
    as anything but a value; and a choice the submit would have made. SpecError otherwise."""
    for what, value, known in (
        ("primaries", hdr.primaries, PRIMARIES),
        ("transfer", hdr.transfer, TRANSFERS),
        ("matrix", hdr.matrix, MATRICES),
        ("range", hdr.range, frozenset({"tv", "pc"})),
    ):
        if value and value not in known:
            raise SpecError(f"the master's colour {what} {value!r} is not one ffmpeg names")
    if not set(hdr.dynamic) <= DYNAMIC:
        raise SpecError(f"the master's dynamic HDR metadata {hdr.dynamic!r} is not HDR10+ or DV")
    m = hdr.mastering
    chroma = [*m.red, *m.green, *m.blue, *m.white] if m else []
    luminance = [m.max_luminance, m.min_luminance] if m else []
    light = [v for v in (hdr.max_cll, hdr.max_fall) if v is not None]
    if not all(0 <= v <= 50000 for v in chroma) or not all(0 <= v <= 2**32 for v in luminance):
        raise SpecError("the master's mastering display is out of range")
    if not all(0 <= v <= 65535 for v in light):
        raise SpecError("the master's content light level is out of range")
    hdr_choice("the master", replace(hdr, tonemap=False), codec, encoder,
               tonemap=hdr.tonemap, drop_dynamic_hdr=bool(hdr.dynamic))  # fmt: skip
