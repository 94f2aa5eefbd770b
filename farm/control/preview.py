"""Preview frames first (`farm submit --preview N`): their chunks sent ahead of the job's others,
at the farm's top priority (the rules: farm.core.preview; the hold after them:
farm.control.hold)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from farm.core.pipeline import first_phase, kind_of
from farm.core.preview import PREVIEW_PRIORITY, frames_of

if TYPE_CHECKING:
    from farm.dispatch import Dispatcher


def is_preview(frames: Iterable[int], preview: set[int]) -> bool:
    """A chunk of preview frames only (one frame, as planned; a rebuild keeps them so)."""
    listed = list(frames)
    return bool(listed) and set(listed) <= preview


def send_chunks(
    dispatch: Dispatcher, job: dict[str, str], indices: Iterable[tuple[int, Iterable[int]]]
) -> int:
    """Send the job's first phase for each (index, frames): its preview chunks first, at the
    farm's top priority, then the others at the job's own. The number sent."""
    job_id = job["id"]
    phase = first_phase(kind_of(job)).phase
    preview = set(frames_of(job))
    listed = [(i, tuple(f)) for i, f in indices]
    first = [i for i, f in listed if is_preview(f, preview)]
    rest = [i for i, f in listed if not is_preview(f, preview)]
    for index in first:
        dispatch.send(phase, job_id, index, priority=PREVIEW_PRIORITY)
    for index in rest:
        dispatch.send(phase, job_id, index)
    return len(listed)


def chunk_frames(chunk: dict[str, str]) -> tuple[int, ...]:
    return tuple(int(f) for f in json.loads(chunk.get("frames") or "[]"))
