"""A ladder job's segment: the chunk's frames of the master decoded once and encoded into every
rendition (farm.media.ladder), each checked by ffprobe and uploaded, then the manifest last.

Rendition 0 (the largest) is the chunk's segment as any transcode names it; the others sit beside it
(`…-claimN.rK.mp4`) and the manifest lists them all under `renditions`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from farm.adapters.store import sha256_file
from farm.core.errors import PermanentError
from farm.core.spec import Rung
from farm.media.ffgraph import EncodeSettings
from farm.media.ladder import ladder_segment_argv, rendition_name
from farm.media.probe import input_name, probe_streams
from farm.media.quality import Score
from farm.media.transcode_graph import SegmentCut
from workers.attempt.lifecycle import ChunkAttempt, Outcome, segment_manifest
from workers.host.box import media_box
from workers.phases.scoring import score_renditions


def rendition_key(attempt: ChunkAttempt, index: int, container: str) -> str:
    """Rendition 0 where a single output's segment goes; rendition K beside it."""
    if index == 0:
        return attempt.segment_key(container)
    return attempt.segment_key(rendition_name(index, container))


def ladder_segment(
    attempt: ChunkAttempt,
    *,
    settings: EncodeSettings,
    source: Path,
    container: str,
    cut: SegmentCut,
    started: float,
) -> Outcome:
    """Every rung of this chunk from one decode; each verified (frames exact, size) and uploaded."""
    ctx, index, spec = attempt.ctx, attempt.index, attempt.spec
    ext = spec.codec.container
    workspace = attempt.fresh_workspace()
    outs = [workspace / f"{index:05d}.{rendition_name(n, ext)}" for n in range(len(spec.ladder))]
    outs[0] = workspace / f"{index:05d}.{ext}"
    argv = ladder_segment_argv(
        ffmpeg_bin=ctx.settings.ffmpeg,
        source=source,
        outs=[str(o) for o in outs],
        cut=cut,
        rungs=spec.ladder,
        settings=settings,
    )
    box = media_box(ctx.settings, writable=(workspace,), readable=(source,), gpu=settings.is_nvenc)
    attempt.run_child(argv, what=f"ffmpeg ({settings.encoder}, {len(outs)} renditions)", box=box)
    encoded_s = time.monotonic() - started
    infos = [probe_streams(ctx.settings.ffprobe, out, box) for out in outs]
    for n, (info, rung) in enumerate(zip(infos, spec.ladder, strict=True)):
        if info.frames != cut.count or (info.width, info.height) != (rung.width, rung.height):
            raise PermanentError(
                f"segment {index} rendition {n} is {info.width}x{info.height} with {info.frames} "
                f"frames; expected {rung.width}x{rung.height} with {cut.count}"
            )
    scoring = time.monotonic()  # a second decode of the master's span (docs/design/quality.md)
    scores = [] if spec.score == "none" else score_renditions(
        attempt, source=source, renditions=outs, cut=cut, spec=spec, settings=settings
    )  # fmt: skip
    score_s = time.monotonic() - scoring
    attempt.check_lease("before the upload")
    renditions: list[dict[str, Any]] = []
    etag = ""
    for n, (out, info, rung) in enumerate(zip(outs, infos, spec.ladder, strict=True)):
        key = rendition_key(attempt, n, ext)
        tag = ctx.store.put_file(key, out, intermediate=True)
        etag = etag or tag
        rendition = _rendition(key, out, info.manifest_fields(settings.fps), rung)
        if scores:
            rendition["quality"] = {**scores[n].fields(), "frames_scored": scores[n].frames}
        renditions.append(rendition)
    worst = worst_score(scores) if scores else None
    scored = {} if worst is None else {**worst.fields(), **rung_fields(scores),
                                       "score_s": round(score_s, 3)}  # fmt: skip
    named = {input_name(source), *map(str, outs)}
    manifest = segment_manifest(
        attempt,
        frames={"first": cut.first, "end": cut.end, "seek_s": cut.seek_s},
        frame_count=cut.count,
        segment=outs[0],
        info=infos[0].manifest_fields(settings.fps),
        encoder={
            "name": settings.encoder,
            "quality": settings.quality,
            "preset": settings.preset,
            "ladder": [str(r) for r in spec.ladder],
            "argv": [a for a in argv[1:] if a not in named],
        },
        master={"key": attempt.job["source_key"], "container": container},
        etag=etag,
        renditions=renditions,
        **({} if worst is None else
           {"quality": {**worst.fields(), "frames_scored": worst.frames,
                        "of": "the worst rendition"}}),
    )  # fmt: skip
    return Outcome(
        fields={
            "encode_s": round(encoded_s, 3),
            "frames_rendered": cut.count,
            "encoder": settings.encoder,
            **scored,  # none under --score none
        },
        manifest=manifest,
        summary={"frames": infos[0].frames, "encoder": settings.encoder, "renditions": len(outs)},
    )


def worst_score(scores: list[Score]) -> Score:
    """The chunk's score as one number pair: the lowest SSIM and the lowest PSNR of its rungs."""
    return Score(ssim=min(s.ssim for s in scores), psnr_db=min(s.psnr_db for s in scores),
                 frames=scores[0].frames)  # fmt: skip


def rung_fields(scores: list[Score]) -> dict[str, str]:
    """Each rung's score as the chunk's ledger fields (rung order, comma-separated), which
    farm.core.report.chunk_rungs reads back."""
    fields = [s.fields() for s in scores]
    return {
        "rungs_ssim": ",".join(str(f["ssim"]) for f in fields),
        "rungs_psnr_db": ",".join(str(f["psnr_db"]) for f in fields),
    }


def _rendition(key: str, out: Path, info: dict[str, Any], rung: Rung) -> dict[str, Any]:
    return {
        "key": key,
        "size": out.stat().st_size,
        "sha256": sha256_file(out),
        "bitrate_kbps": rung.bitrate_kbps,
        **info,
    }
