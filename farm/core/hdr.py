"""A master's HDR signalling as read at submit (farm.media.hdrprobe reads it): its colour tags,
its HDR10 static metadata, the dynamic metadata it carries, and what the job does with them.
Plain values recorded in the job spec; the encoders' options are built in farm.media.hdrargs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PQ = "smpte2084"
HLG = "arib-std-b67"
HDR_TRANSFERS = (PQ, HLG)
"""Transfer functions (ffprobe's names) that make a master HDR."""
HDR10_PLUS = "HDR10+"
DOLBY_VISION = "Dolby Vision"


@dataclass(frozen=True, slots=True, kw_only=True)
class MasteringDisplay:
    """SMPTE ST 2086, in the units HEVC's SEI and x265 use: chromaticities in 0.00002 (x 50000),
    luminance in 0.0001 cd/m2 (x 10000)."""

    red: tuple[int, int]
    green: tuple[int, int]
    blue: tuple[int, int]
    white: tuple[int, int]
    max_luminance: int
    min_luminance: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MasteringDisplay:
        pairs = {}
        for key in ("red", "green", "blue", "white"):
            x, y = data[key]  # ValueError unless a pair
            pairs[key] = (int(x), int(y))
        return cls(
            **pairs,
            max_luminance=int(data["max_luminance"]),
            min_luminance=int(data["min_luminance"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HdrInfo:
    """An HDR master's signalling, and the job's choice: keep it (HDR out) or tone-map to SDR."""

    primaries: str
    """ffprobe's names: bt2020, smpte2084, bt2020nc, tv; '' where the master leaves it unset."""
    transfer: str
    matrix: str
    range: str = "tv"
    mastering: MasteringDisplay | None = None
    max_cll: int | None = None
    """Content light level (MaxCLL, MaxFALL) in cd/m2; None when the master has none."""
    max_fall: int | None = None
    dynamic: tuple[str, ...] = ()
    """Dynamic metadata found in the master (HDR10+, Dolby Vision); the farm carries none of it,
    so a job records them only when the submit was told to drop them (--drop-dynamic-hdr)."""
    tonemap: bool = False
    """--tonemap: the output is SDR BT.709, tone-mapped from the master."""

    @property
    def static(self) -> bool:
        """Whether the master has HDR10 static metadata the encoder must write (SEI / OBU)."""
        return self.mastering is not None or self.max_cll is not None

    @property
    def is_hdr(self) -> bool:
        return self.transfer in HDR_TRANSFERS or self.static

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["dynamic"] = list(self.dynamic)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HdrInfo:
        mastering = data.get("mastering")
        rest = {k: v for k, v in data.items() if k not in ("mastering", "dynamic")}
        return cls(
            **rest,
            mastering=MasteringDisplay.from_json(mastering) if mastering else None,
            dynamic=tuple(data.get("dynamic", ())),
        )
