"""The deliverable's container (`--container mp4|mov|mkv`): which a codec and a job may have,
and what Matroska holds as it is (pure). docs/design/streams.md says what happens per stream."""

from __future__ import annotations

from farm.core.errors import SpecError
from farm.core.spec import Codec

CONTAINERS = ("mp4", "mov", "mkv")
MKV = "mkv"
MKV_BITMAP_SUBTITLES = frozenset({"hdmv_pgs_subtitle", "dvd_subtitle", "dvb_subtitle"})
"""Bitmap subtitles a Matroska deliverable holds as they are."""
MKV_TEXT_SUBTITLES = frozenset({"subrip", "srt", "ass", "ssa", "webvtt", "text"})
"""Text subtitles a Matroska deliverable holds as they are (styling and all); mov_text, which
Matroska has no codec ID for, becomes SubRip."""


def container_choice(container: str | None, codec: Codec, *, ladder: bool, package: bool) -> str:
    """`--container` checked against the codec and the job: '' (the codec's own), or `mkv`.
    The segments stay the codec's MP4/MOV (the join is MP4's); only the final mux writes
    Matroska, so a ladder (its renditions and CMAF package are MP4) is refused with it."""
    if container is None or container == codec.container:
        return ""
    if container not in CONTAINERS:
        raise SpecError(f"--container {container!r}: choose one of {', '.join(CONTAINERS)}")
    if container != MKV:
        raise SpecError(
            f"--container {container}: the farm delivers {codec} in "
            f"{codec.container.upper()} (or MKV with --container mkv); leave --container out"
        )
    if package:
        raise SpecError(
            "--container mkv with --package: a package's CMAF segments are MP4 and the package "
            "is its own container; leave --container out"
        )
    if ladder:
        raise SpecError(
            "--container mkv with --ladder: a ladder's renditions are MP4 (one decode, several "
            "encodes, joined as MP4); submit without --ladder for one MKV, or leave --container out"
        )
    return MKV
