"""What a user asks for, validated once at the edge: a JobSpec, or a SpecError that says what to fix."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from farm.errors import SpecError
from farm.master import MasterInfo

MAX_WIDTH, MAX_HEIGHT = 7680, 4320
MAX_FRAMES = 1_000_000
AUTO_CHUNK = 0
"""JobSpec.chunk_size of `--chunk-size auto`: sized by farm.chunking from a probe wave."""
_RANGE = re.compile(r"^\s*(-?\d+)\s*(?:-\s*(-?\d+))?\s*(?::\s*(-?\d+))?\s*$")


class JobKind(StrEnum):
    RENDER = "render"
    """A .blend scene rendered frame by frame, then encoded and stitched."""
    ENCODE = "encode"
    """An existing video master transcoded in frame-exact segments, then stitched."""


class Codec(StrEnum):
    H264 = "h264"
    """H.264 / AVC: plays everywhere."""
    HEVC = "hevc"
    """H.265 / HEVC: half the bits of H.264 at 4K."""
    AV1 = "av1"
    """AV1: fewer bits again; libsvtav1 in software, av1_nvenc on Ada and newer GPUs."""


class EncoderChoice(StrEnum):
    AUTO = "auto"
    """NVENC where the worker's probe found a working one, else the software encoder."""
    NVENC = "nvenc"
    """NVENC only: a worker without one fails the segment and says so."""
    SOFTWARE = "software"
    """libx264 / libx265 / libsvtav1 even on a GPU host."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameRange:
    """Frames first..last (inclusive) every `step`, as Blender numbers them."""

    first: int
    last: int
    step: int = 1

    @property
    def frames(self) -> tuple[int, ...]:
        return tuple(range(self.first, self.last + 1, self.step))

    @property
    def count(self) -> int:
        return len(range(self.first, self.last + 1, self.step))

    def __str__(self) -> str:
        text = f"{self.first}-{self.last}"
        return text if self.step == 1 else f"{text}:{self.step}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    width: int
    height: int

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A validated render job. Everything past the CLI trusts these values."""

    kind: JobKind = JobKind.RENDER
    source_name: str
    frames: FrameRange
    chunk_size: int
    resolution: Resolution
    fps: float
    samples: int
    codec: Codec
    # Encode jobs only (render jobs keep the defaults):
    encoder: EncoderChoice = EncoderChoice.AUTO
    quality: int | None = None
    """CRF (software) or CQ (NVENC); None: the encoder's default for the codec."""
    preset: str = "medium"
    """x264/x265 preset names; mapped to NVENC p1..p7 and SVT-AV1 presets."""
    master: MasterInfo | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = str(self.kind)
        data["codec"] = str(self.codec)
        data["encoder"] = str(self.encoder)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobSpec:
        return cls(
            kind=JobKind(data["kind"]),
            source_name=data["source_name"],
            frames=FrameRange(**data["frames"]),
            chunk_size=int(data["chunk_size"]),
            resolution=Resolution(**data["resolution"]),
            fps=float(data["fps"]),
            samples=int(data["samples"]),
            codec=Codec(data["codec"]),
            encoder=EncoderChoice(data.get("encoder", "auto")),
            quality=None if data.get("quality") is None else int(data["quality"]),
            preset=str(data.get("preset", "medium")),
            master=MasterInfo.from_json(data["master"]) if data.get("master") else None,
        )


def parse_frames(text: str) -> FrameRange:
    """Parse `1-240`, `1-240:2` or `7` into a FrameRange."""
    match = _RANGE.match(text)
    if not match:
        raise SpecError(
            f"frame range {text!r} is not understood: write FIRST-LAST or FIRST-LAST:STEP, "
            "e.g. 1-240 or 1-240:2"
        )
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    step = int(match.group(3)) if match.group(3) is not None else 1
    if first < 0:
        raise SpecError(f"frame range {text!r} starts below 0: Blender frames start at 0 or more")
    if last < first:
        raise SpecError(f"frame range {text!r} ends before it starts: write {last}-{first}?")
    if step < 1:
        raise SpecError(f"frame range {text!r} has step {step}: the step must be 1 or more")
    frames = FrameRange(first=first, last=last, step=step)
    if frames.count > MAX_FRAMES:
        raise SpecError(f"frame range {text!r} has {frames.count} frames; at most {MAX_FRAMES}")
    return frames


def parse_resolution(text: str) -> Resolution:
    """Parse `1920x1080`; both sides even (video encoders need it), at most 8K UHD."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match:
        raise SpecError(
            f"resolution {text!r} is not understood: write WIDTHxHEIGHT, e.g. 1920x1080"
        )
    width, height = int(match.group(1)), int(match.group(2))
    if width < 16 or height < 16:
        raise SpecError(f"resolution {text!r} is too small: at least 16x16")
    if width > MAX_WIDTH or height > MAX_HEIGHT:
        raise SpecError(f"resolution {text!r} is larger than {MAX_WIDTH}x{MAX_HEIGHT} (8K UHD)")
    if width % 2 or height % 2:
        raise SpecError(
            f"resolution {text!r} has an odd side: H.264/HEVC need even width and height, "
            f"e.g. {width + width % 2}x{height + height % 2}"
        )
    return Resolution(width=width, height=height)


def check_scene_path(path: Path) -> None:
    """A scene must be an existing, readable .blend file that starts with Blender's magic."""
    if not path.exists():
        raise SpecError(f"{path}: no such file; check the path and submit again")
    if not path.is_file():
        raise SpecError(f"{path}: is a directory, not a .blend file")
    if path.suffix.lower() != ".blend":
        raise SpecError(f"{path}: not a .blend file; render jobs take a Blender scene (.blend)")
    with path.open("rb") as fh:
        head = fh.read(7)
    # Compressed .blend files (gzip since 2.8, zstd since 3.0) hide the magic; let those through.
    if head != b"BLENDER" and head[:2] != b"\x1f\x8b" and head[:4] != b"\x28\xb5\x2f\xfd":
        raise SpecError(f"{path}: does not look like a Blender file (no BLENDER header)")


def build_render_spec(
    *,
    source_name: str,
    frames: str,
    chunk_size: int | str,
    resolution: str,
    fps: float,
    samples: int,
    codec: str,
) -> JobSpec:
    """Validate CLI values into a render JobSpec, or raise SpecError naming the bad value.
    `chunk_size` "auto" becomes AUTO_CHUNK."""
    text = str(chunk_size).strip().lower()
    if text == "auto":
        chunk_size = AUTO_CHUNK
    elif not text.lstrip("-").isdigit():
        raise SpecError(f"--chunk-size {chunk_size!r}: write a number of frames, or auto")
    elif int(text) < 1:
        raise SpecError(f"--chunk-size {text}: a chunk holds at least one frame (or write auto)")
    else:
        chunk_size = int(text)
    if not 1 <= fps <= 240:
        raise SpecError(f"--fps {fps}: choose a frame rate between 1 and 240")
    if not 1 <= samples <= 65536:
        raise SpecError(f"--samples {samples}: choose between 1 and 65536 Cycles samples")
    try:
        parsed_codec = Codec(codec)
    except ValueError:
        choices = ", ".join(c.value for c in Codec)
        raise SpecError(f"--codec {codec!r}: choose one of {choices}") from None
    return JobSpec(
        source_name=source_name,
        frames=parse_frames(frames),
        chunk_size=chunk_size,
        resolution=parse_resolution(resolution),
        fps=fps,
        samples=samples,
        codec=parsed_codec,
    )
