"""Frames fixed in place (pure): `farm retry JOB --frames 12-14,40` read against the job's range,
the chunks whose segments hold them, and the record of each fix that `farm status` shows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from farm.core.errors import SpecError
from farm.core.spec import FrameRange

_ITEM = re.compile(r"(\d+)(?:-(\d+))?")  # Blender frames start at 0 (farm.core.spec)


def parse_frame_list(text: str, job_frames: FrameRange) -> tuple[int, ...]:
    """`12-14,40` as the job's frames, sorted, each once: a range takes the job's frames in it
    (every `step`th); a frame or range end outside first..last, a frame the step skips, a range
    backwards or empty: SpecError naming them."""
    items = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in items):
        raise SpecError(f"--frames {text!r}: give frames as 12-14,40 (commas, no empty items)")
    own = set(job_frames.frames)
    chosen: set[int] = set()
    outside: list[str] = []
    for item in items:
        found = _ITEM.fullmatch(item)
        if found is None:
            raise SpecError(f"--frames: {item!r} is not a frame or a range like 12-14")
        first = int(found[1])
        last = first if found[2] is None else int(found[2])
        if last < first:
            raise SpecError(f"--frames: {item} runs backwards; write it {last}-{first}")
        if first < job_frames.first or last > job_frames.last:
            outside.append(item)
            continue
        frames = [f for f in range(first, last + 1) if f in own]
        if not frames:
            outside.append(item)
            continue
        chosen.update(frames)
    if outside:
        raise SpecError(
            f"--frames {', '.join(outside)}: not frames of the job, which renders "
            f"{describe_range(job_frames)}"
        )
    return tuple(sorted(chosen))


def describe_range(frames: FrameRange) -> str:
    step = f" every {frames.step}" if frames.step != 1 else ""
    return f"frames {frames.first}-{frames.last}{step}"


def frames_text(frames: Iterable[int]) -> str:
    """Frames as the shortest `--frames` text: 12-14,40 (runs of consecutive numbers joined)."""
    runs: list[list[int]] = []
    for frame in sorted(set(frames)):
        if runs and frame == runs[-1][-1] + 1:
            runs[-1].append(frame)
        else:
            runs.append([frame])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def chunks_holding(
    chunks: Mapping[int, Sequence[int]], frames: Iterable[int]
) -> dict[int, tuple[int, ...]]:
    """Each chunk whose segment holds a fixed frame, with those frames: the only segments a fix
    encodes again (every other segment is joined as it is). ValueError for a frame no chunk
    holds (a job whose plan is still being made)."""
    owner = {frame: index for index, held in chunks.items() for frame in held}
    chosen: dict[int, list[int]] = {}
    missing = []
    for frame in sorted(set(frames)):
        if frame in owner:
            chosen.setdefault(owner[frame], []).append(frame)
        else:
            missing.append(frame)
    if missing:
        raise ValueError(f"no chunk holds frames {frames_text(missing)}")
    return {index: tuple(held) for index, held in sorted(chosen.items())}


@dataclass(frozen=True, slots=True, kw_only=True)
class Fix:
    """One `farm retry --frames`: what was fixed, when, by whom and why, and the version the
    output it replaced was kept as (None: the job had no output yet)."""

    frames: tuple[int, ...]
    reason: str
    by: str
    at: float
    chunks: tuple[int, ...]
    version: int | None = None
    version_key: str = ""
    output_etag: str = ""
    """The ETag of the video the fix replaces: the stitch that makes the new one first moves the
    object with that ETag (and only it) to `version_key` (workers.phases.versions)."""
    still: str = ""
    """A tiled still's fix as its user asked for it (`9 (all 4 tiles)`): its `frames` are the
    tile slots the chunks render, which are no frame of the scene (farm.core.tiles)."""

    @property
    def shown(self) -> str:
        """The frames fixed, as `farm status` and `farm retry` say them."""
        return self.still or frames_text(self.frames)

    def to_json(self) -> dict[str, Any]:
        return {
            "frames": list(self.frames),
            "reason": self.reason,
            "by": self.by,
            "at": self.at,
            "chunks": list(self.chunks),
            "version": self.version,
            "version_key": self.version_key,
            "output_etag": self.output_etag,
            **({"still": self.still} if self.still else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fix:
        version = data.get("version")
        return cls(
            frames=tuple(int(f) for f in data.get("frames", ())),
            reason=str(data.get("reason", "")),
            by=str(data.get("by", "")),
            at=float(data.get("at", 0.0)),
            chunks=tuple(int(c) for c in data.get("chunks", ())),
            version=None if version is None else int(version),
            version_key=str(data.get("version_key", "")),
            output_etag=str(data.get("output_etag", "")),
            still=str(data.get("still", "")),
        )


FIXES_FIELD = "fixes"
"""The job field (and control.json entry) listing its fixes as JSON (Fix.to_json)."""


def job_fixes(job: Mapping[str, str]) -> list[Fix]:
    """The fixes a job's ledger record lists, oldest first."""
    try:
        return [Fix.from_json(item) for item in json.loads(job.get(FIXES_FIELD) or "[]")]
    except (ValueError, TypeError, AttributeError):
        return []


def default_reason(user: str) -> str:
    return f"fixed by {user}/farm retry --frames"


def not_kept_yet(job_id: str, version: int) -> str:
    """Why `farm fetch --version N` found no video: the stitch of the fix moves it there."""
    return (
        f"job {job_id}'s video version {version} is not in the store yet: the fix's stitch keeps "
        f"it as it begins (`farm status {job_id} --wait`, then fetch it)"
    )


def versions(fixes: Sequence[Fix]) -> dict[int, str]:
    """The job's kept outputs, version number -> store key, oldest first."""
    return {f.version: f.version_key for f in fixes if f.version is not None and f.version_key}
