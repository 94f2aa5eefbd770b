"""`farm submit`: a scene or a master checked at the edge, priced or queued, and followed
(registered on the `farm` group by farm.cli.main)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from farm.adapters.settings import Settings, command_settings
from farm.cli import remote
from farm.cli.waits import STOPS, say_stop, stopped_waiting
from farm.core.errors import SpecError
from farm.core.report import advance, job_summary, printable, progress_bar, progress_line
from farm.core.spec import JobSpec, build_render_spec, check_scene_path, provenance
from farm.core.state import JobState
from farm.ledger import Ledger
from farm.ledger.ports import SubmitLedger

if TYPE_CHECKING:
    from farm.blender.assets import Sources, Traced
    from farm.control.intake import Submitted
    from farm.core.sources import SceneInfo

allow_path_option = click.option(
    "--allow-path",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Upload files the scene uses from this folder too (repeatable; on retry, with --scene: "
    "the fixed scene's); by default only files in the scene's own folder tree go "
    "(FARM_ASSET_ALLOW_PATHS: more, `:`-separated).",
)
"""`--allow-path`, one option for `submit` and `retry --scene` (farm.cli.main)."""


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--frames", default=None, help="FIRST-LAST or FIRST-LAST:STEP (default: the scene's range)."
)
@click.option(
    "--chunk-size",
    default="auto",
    show_default=True,
    help="Frames per render chunk, or auto: sized from a probe of Blender start-up and frame time.",
)
@click.option(
    "--resolution",
    default=None,
    help="WIDTHxHEIGHT (default: the scene's size and percentage; 3840x2160 encode).",
)
@click.option("--fps", type=float, default=None, help="Frame rate (default: the scene's).")
@click.option("--samples", type=int, default=None, help="Render samples (default: the scene's).")
@click.option(
    "--engine", default=None, help="cycles, eevee or workbench (default: the scene's engine)."
)
@click.option("--camera", default=None, help="Camera object (default: the scene's active camera).")
@click.option("--each", default=None, metavar="view-layer|camera",
              help="One job per view layer the scene renders, or per camera, grouped: each "
                   "renders that layer alone, or through that camera.")  # fmt: skip
@click.option(
    "--cameras",
    default=None,
    metavar="A,B",
    help="One job per camera named (comma-separated), grouped as --each camera.",
)
@click.option(
    "--allow-missing",
    is_flag=True,
    help="Submit even if files the scene uses are missing here (recorded on the job).",
)
@allow_path_option
@click.option(
    "--trusted-scripts",
    is_flag=True,
    help="Run the Python stored in the .blend (drivers, startup scripts). Off by default: only "
    "for scenes from people you trust; recorded on the job.",
)
@click.option(
    "--codec",
    default="h264",
    show_default=True,
    help="h264, hevc, av1, hevc10 (10-bit Main10) or prores (ProRes 422 HQ in a .mov).",
)
@click.option(
    "--kind",
    type=click.Choice(["render", "transcode", "encode"]),
    default=None,
    help="Default: render for a .blend file, transcode for a video master (encode: the same).",
)
@click.option("--quality", type=int, default=None, help="Encode: CRF/CQ, lower is better.")
@click.option("--target-quality", default=None, metavar="METRIC=VALUE",
              help="Encode: ssim=0.98, psnr=40 or vmaf=95; each chunk's CRF/CQ is the highest "
                   "whose short probes reach it (instead of --quality).")  # fmt: skip
@click.option("--score", type=click.Choice(["ssim", "vmaf", "none"]), default=None,
              help="Encode: what each segment is scored with against the master: ssim (SSIM and "
                   "PSNR, the default), vmaf (VMAF too, libvmaf: about 3x their cost) or none "
                   "(no scoring pass).")  # fmt: skip
@click.option("--encoder", default="auto", show_default=True, help="Encode: auto, nvenc, software.")
@click.option("--preset", default="medium", show_default=True, help="Encode: x264-style preset.")
@click.option("--segment-frames", type=int, default=None, help="Encode: frames per segment.")
@click.option("--no-scene-cuts", is_flag=True,
              help="Encode: cut segments every --segment-frames frames; without it the master is "
                   "decoded once at submit to find scene cuts, and boundaries move onto them.")  # fmt: skip
@click.option("--tonemap", is_flag=True,
              help="Encode: an HDR master (PQ or HLG) delivered as SDR BT.709, tone-mapped.")  # fmt: skip
@click.option("--ladder", default=None, metavar="RUNGS",
              help="Encode: renditions from one decode of each segment, e.g. 1080p,720p,360p or "
                   "1920x1080@6M,1280x720@3M (named rungs: a default bitrate per codec; none "
                   "above the master's size).")  # fmt: skip
@click.option("--package", type=click.Choice(["hls", "dash", "both"]), default=None,
              help="Encode, with --ladder: package the renditions as CMAF for HLS, DASH or both, "
                   "each audio track an alternate rendition.")  # fmt: skip
@click.option("--drop", default=None, metavar="STREAMS",
              help="Encode: leave these of the master's streams out, e.g. s:1,a:2 (KIND:N as "
                   "submit lists them; a, s, d, t, v) or whole kinds: audio, subtitles, data, "
                   "attachments, chapters, timecode. Without it every stream is kept or the "
                   "submit is refused naming it.")  # fmt: skip
@click.option("--container", type=click.Choice(["mp4", "mov", "mkv"]), default=None,
              help="Encode: the deliverable's container; default MP4 (MOV for prores). mkv keeps "
                   "every audio codec, ASS, PGS and fonts as they are.")  # fmt: skip
@click.option("--deinterlace", is_flag=True,
              help="Encode: deinterlace an interlaced master (bwdif, one frame per frame); an "
                   "interlaced master is refused without it.")  # fmt: skip
@click.option("--drop-dynamic-hdr", is_flag=True,
              help="Encode: a master with HDR10+ or Dolby Vision delivered as HDR10 (its static "
                   "metadata kept, the dynamic metadata dropped); refused without it.")  # fmt: skip
@click.option(
    "--notify", default=None, callback=lambda c, _p, v: _webhook_url(c, v),
    help="POST the job's events (done, failed, paused, ...) to this URL, signed (X-Farm-Signature).",
)  # fmt: skip
@click.option("--wait", is_flag=True, help="Show progress until the job ends.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--estimate",
    is_flag=True,
    help="Plan and price the job (frames, chunks, GPU-hours, time, cost) and queue none of it; "
    "when the farm has no timings of the scene, a short probe job (three of its frames, billed) "
    "runs first.",
)
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0),
    default=None,
    help="Budget in dollars: the job pauses before passing it (default: settings).",
)
@click.option("--priority", type=click.IntRange(0, 100), default=50, show_default=True,
              help="0..100, higher runs first.")  # fmt: skip
@click.option("--project", default=None,
              help="The project the job runs for: its share of the workers and its quota "
                   "(`farm projects` lists them).")  # fmt: skip
@click.option("--after", default=None, metavar="JOBS",
              help="Wait for these jobs (ids, comma-separated) to be done first (the job is `waiting`, nothing of it "
                   "runs or is charged); one that fails or is cancelled cancels this one.")  # fmt: skip
@click.option("--after-any", default=None, metavar="JOBS",
              help="Wait for these jobs to end, however they end (done, failed or cancelled), "
                   "then run.")  # fmt: skip
@click.option("--preview", type=click.IntRange(0, 100), default=0, metavar="N",
              help="Render N frames spread over the range (the first, the last, evenly between) "
                   "first, at the farm's top priority, then the rest.")  # fmt: skip
@click.option("--hold", is_flag=True,
              help="With --preview: stop `held` after the preview frames (the rest costs nothing "
                   "until `farm resume JOB`).")  # fmt: skip
@click.option("--tiles", default=None, metavar="N|auto",
              help="Render one still (--frames 9) as N tiles on up to N workers, merged into one "
                   "image in the scene's format; auto sizes them from resolution and samples.")  # fmt: skip
@click.option("--check-frames", is_flag=True,
              help="Flag frames that come out black or one flat colour; `farm status` lists "
                   "them with the `farm retry --frames` that fixes them.")  # fmt: skip
@click.pass_context
def submit(
    ctx: click.Context,
    path: Path,
    frames: str | None,
    chunk_size: str,
    resolution: str | None,
    fps: float | None,
    samples: int | None,
    engine: str | None,
    camera: str | None,
    each: str | None,
    cameras: str | None,
    allow_missing: bool,
    allow_path: tuple[Path, ...],
    trusted_scripts: bool,
    codec: str,
    kind: str | None,
    quality: int | None,
    target_quality: str | None,
    score: str | None,
    encoder: str,
    preset: str,
    segment_frames: int | None,
    tonemap: bool,
    drop_dynamic_hdr: bool,
    drop: str | None,
    deinterlace: bool,
    container: str | None,
    ladder: str | None,
    package: str | None,
    no_scene_cuts: bool,
    notify: str | None,
    wait: bool,
    as_json: bool,
    estimate: bool,
    max_cost: float | None,
    priority: int,
    project: str | None,
    after: str | None,
    after_any: str | None,
    preview: int,
    hold: bool,
    check_frames: bool,
    tiles: str | None,
) -> None:
    """Submit a .blend scene to render, or a video master to transcode, into a video."""
    from farm.control.intake import submit as submit_job
    from farm.core.spec import JobKind
    from farm.media.hdrspec import hdr_note
    from farm.media.probe import submit_box
    from farm.media.streamnotes import streams_notes
    from farm.media.transcode_spec import transcode_spec_from_file, vfr_note

    parents = _parents(after, after_any)
    loaded = command_settings(ctx)
    default_kind = JobKind.RENDER if path.suffix.lower() == ".blend" else JobKind.TRANSCODE
    job_kind = JobKind.parse(kind) if kind else default_kind
    _refuse_flags_of_the_other_kind(ctx, job_kind, path)
    if job_kind is JobKind.TRANSCODE:
        if not no_scene_cuts and not as_json:
            click.echo(f"scanning {printable(path.name)} for scene cuts (it is decoded once; "
                       "--no-scene-cuts skips this)", err=True)  # fmt: skip
        with submit_box(loaded, path) as box:  # ffprobe as a worker runs it: boxed, no network
            spec = transcode_spec_from_file(
                path,
                ffprobe=loaded.ffprobe,
                ffmpeg=loaded.ffmpeg,
                frames=frames,
                box=box,
                resolution=resolution,
                codec=codec,
                quality=quality,
                target_quality=target_quality,
                score=score,
                vmaf_missing=_vmaf_missing(loaded, target_quality, score or "ssim"),
                encoder=encoder,
                preset=preset,
                segment_frames=segment_frames,
                tonemap=tonemap,
                drop_dynamic_hdr=drop_dynamic_hdr,
                drop=drop,
                deinterlace=deinterlace,
                container=container,
                ladder=ladder,
                package=package,
                scene_cuts=not no_scene_cuts,
            )
        for note in (vfr_note(spec), hdr_note(spec), *streams_notes(spec)):
            if note:
                click.echo(printable(note), err=True)
        traced = None
    else:
        scene_flags = {"frames": frames, "resolution": resolution, "fps": fps,
                       "samples": samples, "engine": engine, "camera": camera}  # fmt: skip
        from farm.blender.assets import Sources

        sources = Sources.of(loaded, tuple(map(str, allow_path)), ctx.meta.get("config_path"))
        spec, traced = _render_spec(
            path, scene_flags, chunk_size=chunk_size, codec=codec, allow_missing=allow_missing,
            sources=sources,
        )  # fmt: skip
        spec = replace(spec, trusted_scripts=trusted_scripts, check_frames=check_frames)
    if parents and not estimate:  # an estimate prices the job alone: it never waits
        spec = replace(spec, after=parents, after_any=after_any is not None)
    spec = _with_preview(spec, preview, hold, estimate=estimate)
    if tiles is not None:
        spec = _with_tiles(ctx, spec, tiles, loaded, estimate=estimate)
    specs = _siblings(spec, each, cameras, estimate=estimate)
    if api := remote.client(loaded):  # the farm's API (farm login): files up by presigned PUT
        ctx.exit(remote.submit(api, specs, path, traced, priority=priority, max_cost=max_cost,
                               notify=notify, wait=wait, as_json=as_json, estimate=estimate,
                               project=project))  # fmt: skip
    settings = loaded.require_farm()
    if project and not estimate:  # before a byte of the scene goes up
        from farm.control.projects import require_project

        require_project(Ledger.from_url(settings.redis_url).projects(), project)
    if estimate:
        _print_estimate(settings, spec, path, traced, as_json)
        return
    made = [
        (one, submit_job(settings, one, path, traced, priority=priority, max_cost=max_cost,
                         notify=notify, project=project))
        for one in specs
    ]  # fmt: skip
    if not wait:
        answers = [_submitted_json(one, done, traced) for one, done in made]
        if as_json:
            click.echo(json.dumps(remote.grouped_json(specs, answers)))
        else:
            for _one, done in made:
                click.echo(done.job_id)
        return
    summaries = []
    for one, done in made:
        if not as_json:
            click.echo(f"job {done.job_id}{_member(one)}: {done.frames} frames in {done.chunks} "
                       "chunks", err=True)  # fmt: skip
            if done.state == "waiting":
                click.echo(f"waiting for {', '.join(one.after)}", err=True)
            if one.hold:
                click.echo(f"holds after {one.preview} preview frames: `farm resume "
                           f"{done.job_id}` renders the rest", err=True)  # fmt: skip
    for one, done in made:
        summary = wait_for_job(settings, done.job_id, quiet=as_json)
        summaries.append({**summary, "settings": provenance(one)})
        if not as_json and summary["state"] == "done":
            click.echo(f"done: {summary['output']}  (farm fetch {done.job_id} DEST)")
    if as_json:
        click.echo(json.dumps(remote.grouped_json(specs, summaries)))
    ctx.exit(0 if all(s["state"] == "done" for s in summaries) else 1)


def _with_preview(spec: JobSpec, count: int, hold: bool, *, estimate: bool) -> JobSpec:
    """`--preview N [--hold]` on the spec (render jobs; an estimate prices the whole job)."""
    from farm.core.preview import check_preview
    from farm.core.spec import JobKind

    if not count and not hold:
        return spec
    check_preview(count, hold)
    if spec.kind is not JobKind.RENDER:
        raise SpecError("--preview renders frames of a scene: submit a .blend (a transcode has "
                        "no preview)")  # fmt: skip
    return spec if estimate else replace(spec, preview=count, hold=hold)


def _with_tiles(
    ctx: click.Context, spec: JobSpec, text: str, loaded: Settings, *, estimate: bool
) -> JobSpec:
    """`--tiles N|auto` on a render spec (farm.core.tiles.tiled): SpecError (exit 2) for a flag
    a still would ignore, and for what cannot be tiled."""
    import contextlib

    from farm.core.errors import FarmError
    from farm.core.tiles import parse_tiles, tiled

    given = [name for name in ("chunk_size", "fps", "codec")
             if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]  # fmt: skip
    if given or estimate:
        flags = ", ".join("--" + name.replace("_", "-") for name in given) or "--estimate"
        raise SpecError(f"{flags} with --tiles: a tiled still is one image, not a video; leave "
                        f"{'it' if len(given) < 2 else 'them'} out")  # fmt: skip
    count = parse_tiles(text)
    workers = 1
    if count is None and loaded.redis_url and not remote.client(loaded):
        with contextlib.suppress(FarmError):  # no farm to ask: auto sizes for one worker
            hosts = Ledger.from_url(loaded.redis_url).workers().values()
            workers = sum(1 for w in hosts if "render" in w.get("queues", ())) or 1
    return tiled(spec, count, workers=workers)


def _siblings(
    spec: JobSpec, each: str | None, cameras: str | None, *, estimate: bool
) -> tuple[JobSpec, ...]:
    """The one spec, or with `--each`/`--cameras` its siblings (farm.core.siblings), their
    notes said; SpecError (exit 2) for what cannot be split."""
    from farm.core.siblings import expand, new_group_id, parse_each

    by, names = parse_each(each, cameras)
    if by is None:
        return (spec,)
    if estimate:
        raise SpecError(
            f"--estimate with --each {by}: estimate the scene without --each (each job renders "
            "the same frames), then submit with --each"
        )
    found = expand(spec, by, names, group_id=new_group_id())
    for note in found.notes:
        click.echo(printable(note), err=True)
    if group := found.group:
        members = ", ".join(one.group.member for one in found.specs if one.group)
        click.echo(printable(f"group {group.id}: {len(found.specs)} jobs, one per {by}: "
                             f"{members}"), err=True)  # fmt: skip
    return found.specs


def _member(spec: JobSpec) -> str:
    return f" ({printable(spec.group.member)})" if spec.group else ""


def _submitted_json(spec: JobSpec, done: Submitted, traced: Traced | None) -> dict[str, Any]:
    return {
        "id": done.job_id,
        "state": done.state,
        "chunks_total": done.chunks,
        "frames_total": done.frames,
        "source_key": done.source_key,
        "settings": provenance(spec),
        "assets": {
            "files": len(traced.manifest.assets) if traced else 0,
            "uploaded": done.assets_uploaded,
            "reused": done.assets_reused,
            "bytes_uploaded": done.assets_bytes_uploaded,
            "missing": list(traced.manifest.missing) if traced else [],
        },
    }


def _parents(after: str | None, after_any: str | None) -> tuple[str, ...]:
    """`--after` or `--after-any` as job ids (usage error for both, or for a malformed list)."""
    if after is not None and after_any is not None:
        raise click.UsageError("give --after or --after-any, not both")
    text, flag = (after, "--after") if after is not None else (after_any, "--after-any")
    if text is None:
        return ()
    from farm.core.depends import parse_parents

    try:
        return parse_parents(text, flag)
    except SpecError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from exc


def _webhook_url(ctx: click.Context, value: str | None) -> str | None:
    """An http(s) URL whose host is a public address, or in FARM_WEBHOOK_ALLOW: the notifier
    checks again at each delivery (a name that does not resolve here is left to it)."""
    if value and not value.startswith(("http://", "https://")):
        raise click.BadParameter(f"{value!r} is not an http:// or https:// URL")
    if value:
        from farm.control.webhooks import TargetRefused, allowed_ranges, resolve
        from farm.core.errors import UnreachableError

        try:
            resolve(value, allowed_ranges(command_settings(ctx).webhook_allow))
        except TargetRefused as exc:
            raise SpecError(f"--notify {value}: {exc}") from exc
        except UnreachableError:
            pass
    return value


def _render_spec(
    path: Path,
    scene_flags: dict[str, Any],
    *,
    chunk_size: str,
    codec: str,
    allow_missing: bool,
    sources: Sources | None = None,
) -> tuple[JobSpec, Traced]:
    """The scene's own settings, `scene_flags` (those given) over them, and every file it uses
    (from one parse, bounded: farm.blender.isolated); SpecError (exit 2) for a damaged or
    oversized file, missing files or files from places `sources` refuses, before anything is
    queued."""
    from farm.blender.assets import (
        Sources,
        read_and_trace,
        require_complete,
        unremapped_warning,
    )
    from farm.core.spec import scene_resolution

    check_scene_path(path)
    scene, traced = read_and_trace(path, sources or Sources())
    spec = build_render_spec(
        source_name=path.name, chunk_size=chunk_size, codec=codec, scene=scene, **scene_flags
    )
    if scene_flags["resolution"] is None and (note := scene_resolution(scene)[1]):
        click.echo(printable(f"note: {note}"), err=True)
    if scene_flags.get("camera") and scene is not None and scene.marker_cameras:
        note = (f"note: --camera {scene_flags['camera']} holds on every frame; the timeline's "
                f"markers that switch cameras ({', '.join(scene.marker_cameras)}) are overridden "
                "(submit without --camera to render the cut they make)")  # fmt: skip
        click.echo(printable(note), err=True)
    require_complete(traced.manifest, allow_missing=allow_missing)
    for missing in traced.manifest.missing:
        click.echo(printable(f"warning: missing, rendering without it: {missing}"), err=True)
    for path_text in traced.manifest.unremapped:  # --allow-missing: rendered without them
        said = f"warning: rendering without it: {unremapped_warning(path_text)}"
        click.echo(printable(said), err=True)
    return spec, traced


ONLY_FOR = {
    "render": ("fps", "samples", "engine", "camera", "each", "cameras", "allow_missing",
               "allow_path", "trusted_scripts", "chunk_size", "check_frames", "tiles"),
    "transcode": ("quality", "target_quality", "score", "encoder", "preset", "segment_frames", "no_scene_cuts",
                  "tonemap", "drop_dynamic_hdr", "ladder", "package", "drop", "deinterlace", "container"),
}  # fmt: skip
"""`farm submit`'s flags that one kind of job reads and the other does not."""


def _vmaf_missing(settings: Settings, target: str | None, score: str) -> str:
    """Why this farm's VMAF ffmpeg cannot score (farm.adapters.vmaf), tried only for a job that
    asks for VMAF; '' otherwise. The workers try theirs too, and fail a chunk saying so."""
    from farm.adapters.vmaf import find_vmaf
    from farm.media.quality import wants_vmaf

    return find_vmaf(settings.vmaf_ffmpeg).fault if wants_vmaf(target, score) else ""


def _refuse_flags_of_the_other_kind(ctx: click.Context, kind: object, path: Path) -> None:
    """SpecError (exit 2) for a flag given that this kind of job would ignore: a render asked
    for `--quality 18` must not quietly get the default."""
    other = "transcode" if str(kind) == "render" else "render"
    given = [
        "--" + name.replace("_", "-")
        for name in ONLY_FOR[other]
        if ctx.get_parameter_source(name)
        in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    ]
    if given:
        one = len(given) == 1
        raise SpecError(
            f"{', '.join(given)} {'is' if one else 'are'} for {other} jobs; {path.name} is a "
            f"{kind} job, which would ignore {'it' if one else 'them'}: leave "
            f"{'it' if one else 'them'} out"
        )


def trace_fixed_scene(
    path: Path, config: Path | None, allow_paths: tuple[Path, ...] = ()
) -> tuple[SceneInfo, Traced]:
    """`farm retry --scene`: the fixed scene read (its settings and Blender version) and traced
    (every file it uses, uploaded beside it as at submit, from the folders `--allow-path` and
    the settings allow); SpecError for a damaged file or private files."""
    from farm.adapters.settings import load_settings
    from farm.blender.assets import Sources, read_and_trace

    check_scene_path(path)
    sources = Sources.of(load_settings(config_path=config), tuple(map(str, allow_paths)), config)
    return read_and_trace(path, sources)


def settings_text(settings: dict[str, dict[str, Any]]) -> str:
    """`farm status` lines: each render setting, its value and where it came from."""
    lines = ["  settings"]
    for name, item in settings.items():
        value = item["value"]
        shown = ", ".join(value) if isinstance(value, list) else value
        lines.append(f"    {name:<16} {shown!s:<24} ({item['from']})")
    return "\n".join(lines)


def wait_for_job(settings: Settings, job_id: str, quiet: bool) -> dict[str, Any]:
    """Follow the job until it ends or pauses: a live bar on a terminal, a line per change in a
    log. A paused job (its budget, `farm pause`) waits for a person: the wait ends saying why."""
    ledger: SubmitLedger = Ledger.from_url(settings.redis_url)
    tty = sys.stderr.isatty() and not quiet
    bar = progress_bar()
    task = bar.add_task("job", total=1, state="", chunks="", elapsed="", eta="")
    last: tuple[object, ...] = ()
    if tty:
        bar.start()
    try:
        while True:
            summary = job_summary(ledger.job(job_id), ledger.chunks(job_id))
            if tty:
                advance(bar, task, summary)
            elif not quiet and (step := _step(summary)) != last:
                click.echo(progress_line(summary), err=True)
                last = step
            if summary["state"] in STOPS:
                break
            # The view is redrawn every half second; the end is heard within a tenth of one
            # (the job's record alone, not its chunks), so a script waiting on it loses no time.
            redraw = time.monotonic() + 0.5
            while time.monotonic() < redraw and ledger.job(job_id).get("state") not in STOPS:
                time.sleep(0.1)
    except KeyboardInterrupt:
        if tty:
            bar.stop()
        raise stopped_waiting(job_id) from None
    finally:
        if tty:
            bar.stop()  # a second stop is nothing
    if quiet or summary["state"] == JobState.DONE:
        return summary
    say_stop(job_id, summary, ledger.job(job_id).get("paused_reason", ""))
    return summary


def _step(summary: dict[str, Any]) -> tuple[object, ...]:
    """What a log line is written for: the job's state, chunks or frames changed (not its clock,
    or a long job would write a line a second)."""
    keys = ("state", "chunks_done", "chunks_total", "frames_rendered")
    return tuple(summary[k] for k in keys)


def _print_estimate(
    settings: Settings, spec: JobSpec, path: Path, traced: Traced | None, as_json: bool
) -> None:
    """`submit --estimate`: what the job would take and cost; nothing of it is queued."""
    from farm.control.estimate import estimate_job
    from farm.core.cost import money

    if not as_json:
        click.echo("estimating (a short probe job runs if the farm has no timings of this scene)",
                   err=True)  # fmt: skip
    found = estimate_job(
        settings,
        spec,
        path,
        traced,
        say=lambda line: None if as_json else click.echo(line, err=True),
    )
    if as_json:
        click.echo(json.dumps(found.to_json()))
        return
    e, m = found.estimate, found.measurement
    click.echo(f"frames      {e.frames} in {e.chunks} chunks of {e.chunk_size} ({e.reason})")
    click.echo(f"timings     {m.startup_s:.2f} s per chunk + {m.frame_s:.3f} s per frame "
               f"({m.source or 'remembered'})")  # fmt: skip
    click.echo(f"GPU-hours   {e.gpu_s_on_demand / 3600:.3f} on demand, "
               f"{e.gpu_s_spot / 3600:.3f} on spot (reclaimed work included)")  # fmt: skip
    click.echo(f"time        {e.makespan_s / 60:.1f} min on {found.workers} workers")
    click.echo(f"cost        {money(e.cost_spot)} spot, {money(e.cost_on_demand)} on demand "
               f"({found.instance_type}, {found.region}, prices of {found.prices_as_of})")  # fmt: skip
    if found.probe_job:
        click.echo(f"probe       job {found.probe_job}: {money(found.probe_cost)}, "
                   f"{found.probe_s:.0f} s (its timings are remembered for this scene)")  # fmt: skip
