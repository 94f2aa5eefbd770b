"""The `farm` command line. The one place on the control plane that configures logging and turns
a FarmError into a plain message and an exit code (SpecError, UnknownJob and usage errors: 2;
others: 1)."""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from farm.adapters.settings import command_settings, default_config_path
from farm.cli import remote
from farm.cli.addon import addon
from farm.cli.control import COMMANDS as CONTROL_COMMANDS
from farm.cli.login import login, logout
from farm.cli.projects import COMMANDS as PROJECT_COMMANDS
from farm.cli.serve import COMMANDS as SERVE_COMMANDS
from farm.cli.submit import (
    allow_path_option,
    settings_text,
    submit,
    trace_fixed_scene,
    wait_for_job,
)
from farm.cli.users import user as user_group
from farm.cli.waits import unwritable
from farm.core import keys
from farm.core.errors import (
    ConfigError,
    ContainerError,
    FarmError,
    SpecError,
    UnknownJob,
    UnreachableError,
)
from farm.core.report import (
    fixed_text,
    jobs_table,
    printable,
    status_table,
    to_text,
)
from farm.ledger import Ledger

if TYPE_CHECKING:
    from farm.adapters.store import Store

log = logging.getLogger("farm")


class FarmGroup(click.Group):
    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        remote.refuse_farm_only(ctx, name, rest)  # up, worker, ...: not from an API client
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FarmError as exc:
            if ctx.meta.get("debug"):
                raise
            hint = _hint(ctx, exc)
            said = f"farm: error: {str(exc).rstrip('.') if hint else exc}{hint}"
            click.echo(printable(said), err=True)  # a scene's paths may be in it
            ctx.exit(2 if isinstance(exc, (SpecError, UnknownJob, ContainerError)) else 1)
        except OSError as exc:  # a file of the user's: a DEST that cannot be written, a full disk
            if ctx.meta.get("debug"):
                raise
            where = f" ({exc.filename})" if exc.filename else ""
            click.echo(f"farm: error: {exc.strerror or exc}{where}", err=True)
            ctx.exit(1)


def _hint(ctx: click.Context, exc: FarmError) -> str:
    """Where the farm's addresses came from, after an error that may mean they are wrong."""
    path = ctx.meta.get("config_path")
    if path is None:
        return ""
    missing = not path.exists()
    if isinstance(exc, UnreachableError):
        where = f"{path}, which does not exist," if missing else str(path)
        return (
            f"; is the farm up? (`farm up` starts a local one; its addresses come from {where} "
            "and FARM_* variables)"
        )
    if isinstance(exc, ConfigError) and not isinstance(exc, ContainerError) and missing:
        return f" (the config file {path} does not exist)"
    return ""


@click.group(cls=FarmGroup)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Config file (default: $FARM_CONFIG, else ./.farm/config.json where the current "
    "folder has one, else ~/.config/farm/config.json).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, config_path: Path | None) -> None:
    """farm: render Blender scenes and encode video on a farm of GPU workers."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not debug:  # urllib3 warns per retry of a refused certificate; the error says it once
        logging.getLogger("urllib3").setLevel(logging.ERROR)
        # The .blend reader warns of a truncated file or a missing library; farm's own error
        # says it, with what to do.
        logging.getLogger("blender_asset_tracer").setLevel(logging.ERROR)
    ctx.meta["debug"] = debug
    ctx.meta["config_path"] = config_path or default_config_path(os.environ)


@cli.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@click.option("--wait", is_flag=True, help="Follow the job until it ends; exit 0 only if done.")
@click.pass_context
def status(ctx: click.Context, job_id: str, as_json: bool, wait: bool) -> None:
    """Show a job's state, its chunks, its cost and its output."""
    from farm.cli.watch import summarize
    from farm.media.streamnotes import status_lines

    if api := remote.api(ctx):
        summary = remote.status(api, job_id, wait=wait, quiet=as_json)
    else:
        settings = command_settings(ctx).require_farm()
        ledger = Ledger.from_url(settings.redis_url)
        ledger.job_or_fail(job_id)
        if wait:
            wait_for_job(settings, job_id, quiet=as_json)
        summary = summarize(ledger, job_id)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(to_text(status_table(summary)))
        if summary["settings"]:
            click.echo(printable(settings_text(summary["settings"])))
        for missing in summary["spec"].get("missing_assets", []):
            click.echo(printable(f"  missing at submit (--allow-missing): {missing}"))
        for line in status_lines(summary["spec"]):  # a transcode's streams (farm.media.streamnotes)
            click.echo(printable(f"  {line}"))
    if wait:  # the same exit codes as submit --wait
        ctx.exit(0 if summary["state"] == "done" else 1)


@cli.command()
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def jobs(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List jobs, newest first."""
    if api := remote.api(ctx):
        remote.jobs(api, limit, as_json)
        return
    ledger = Ledger.from_url(command_settings(ctx).require_farm().redis_url)
    rows = []
    from farm.cli.watch import summarize

    for job_id in ledger.job_ids(limit):
        rows.append(summarize(ledger, job_id, with_chunks=False))
    if as_json:
        click.echo(json.dumps(rows))
        return
    click.echo(to_text(jobs_table(rows)))


@cli.command()
@click.argument("job_id")
@click.argument("dest_text", metavar="DEST", type=click.Path())
@click.option(
    "--frames",
    "with_frames",
    is_flag=True,
    help="Download the rendered frames too, and what the scene's File Output nodes wrote.",
)
@click.option(
    "--version",
    type=click.IntRange(min=1),
    default=None,
    help="An earlier video of the job, kept when frames were fixed (`farm status` lists them).",
)
@click.pass_context
def fetch(
    ctx: click.Context, job_id: str, dest_text: str, with_frames: bool, version: int | None
) -> None:
    """Download a finished job's video (and frames) to DEST: a file, or a folder (one that
    exists, or one named with a trailing /) to put JOB.mp4 in."""
    if api := remote.api(ctx):
        remote.fetch(api, job_id, dest_text, with_frames, version)
        return
    from farm.adapters.store import Store
    from farm.control.jobs import frame_files
    from farm.control.rebuild import stored_output
    from farm.core.naming import OutputPattern, scene_named

    settings = command_settings(ctx).require_farm()
    ledger = Ledger.from_url(settings.redis_url)
    store = Store.from_settings(settings)
    job = ledger.job(job_id)
    if not job:  # a ledger that lost it: a done job's video is in the store
        with contextlib.suppress(FarmError):  # unreachable too: the job is unknown
            if output := stored_output(store, job_id):
                job = {"state": "done", "output": output}
    job = job or ledger.job_or_fail(job_id)
    partial = job.get("state") in ("failed", "cancelled", "paused") and with_frames
    if version is not None:
        from farm.control.fixes import version_key
        from farm.core.fixes import not_kept_yet

        job = {**job, "output": version_key(job, version)}
        partial = False
        target_name = f"{job_id}.v{version}"
    else:
        from farm.core.siblings import video_stem

        target_name = video_stem(job_id, job.get("spec"))  # a sibling's: shot.CamB (--each)
    if job.get("state") != "done" and not partial and version is None:
        raise FarmError(
            f"job {job_id} is {job.get('state')}; its video exists once it is done "
            "(`--frames` fetches the frames done so far of a failed, cancelled or paused job)"
        )
    ext = Path(job.get("output") or "x.mp4").suffix
    dest = Path(dest_text)
    folder = dest.is_dir() or dest_text.endswith(("/", os.sep))
    target = dest / f"{target_name}{ext}" if folder else dest
    try:
        if not partial:
            if version is not None and store.head(job["output"]) is None:
                raise FarmError(not_kept_yet(job_id, version))
            store.get_file(job["output"], target)
            click.echo(str(target))
            if still_passes := _still_passes(store, job):  # a tiled still's, beside its image
                from farm.core.tiles import PASSES_EXT

                passes = target.with_name(f"{target.stem}.{PASSES_EXT}")
                store.get_file(still_passes, passes)
                click.echo(str(passes))
            if job.get("package") and version is None:  # a ladder's HLS/DASH, beside the video
                from farm.control.packages import fetch_package

                package = target.with_name(target.stem + "-package")
                fetch_package(store, job["package"], package)
                click.echo(str(package))
        if with_frames:
            frames_dir = (dest if folder else dest.parent) / f"{job_id}-frames"
            # The frames in the scene's own format (EXR, PNG) and what the scene's File Output
            # nodes wrote (passes for compositing), as each frame's record names them.
            found = frame_files(store, job_id, ledger.frame_records(job_id))
            if not found:  # a transcode, or a job that failed before its first frame
                raise FarmError(f"job {job_id} has no frames in the store")
            # Each frame as the scene's Output path names it (`render/shot010_0019.exr`).
            named = scene_named(job_id, OutputPattern.of_spec(job.get("spec")), found)
            if named.note:
                click.echo(printable(named.note), err=True)
            for key, path in named.files:
                store.get_file(key, frames_dir.joinpath(*path.parts))
            click.echo(str(frames_dir))
    except OSError as exc:
        raise unwritable(exc, target) from exc


def _still_passes(store: Store, job: dict[str, str]) -> str:
    """The store key of a tiled still's merged passes (farm.core.tiles.passes_key), or "" for
    any other job; a still merged before stills had passes says so."""
    from farm.core.tiles import is_tiled, passes_key

    if not is_tiled(job.get("spec")):
        return ""
    key = passes_key(job["output"])
    if store.head(key) is None:
        click.echo(f"{job.get('id', 'the job')}: its still has no passes file ({key})", err=True)
        return ""
    return key


@cli.command()
@click.argument("job_id")
@click.pass_context
def cancel(ctx: click.Context, job_id: str) -> None:
    """Cancel a job: queued chunks never start, running ones stop within seconds."""
    if api := remote.api(ctx):
        remote.cancel(api, job_id)
        return
    from farm.control.jobs import cancel as cancel_job

    chunks = cancel_job(command_settings(ctx).require_farm(), job_id)
    click.echo(
        f"cancelled {job_id} ({len(chunks)} unfinished chunks); `farm retry {job_id} --all` resumes it"
    )


@cli.command()
@click.argument("job_id")
@click.option(
    "--all",
    "every_unfinished",
    is_flag=True,
    help="Requeue every unfinished chunk, not only the failed ones.",
)
@click.option(
    "--scene",
    type=click.Path(path_type=Path),
    default=None,
    help="A fixed .blend to render the remaining frames from.",
)
@click.option(
    "--frames",
    "frames",
    default=None,
    metavar="LIST",
    help="Fix these frames of a done or failed render job (12-14,40): only they are rendered "
    "again, only the segments holding them encoded again; the old video is kept as a version.",
)
@click.option("--reason", default="", help="Why the frames are fixed, as `farm status` shows it.")
@allow_path_option
@click.pass_context
def retry(
    ctx: click.Context,
    job_id: str,
    every_unfinished: bool,
    scene: Path | None,
    frames: str | None,
    reason: str,
    allow_path: tuple[Path, ...],
) -> None:
    """Requeue a failed or cancelled job's chunks; frames already done are reused. With
    --frames, fix frames of a done (or failed) job in place."""
    if frames is not None and (scene is not None or every_unfinished):
        raise click.UsageError("--frames fixes frames in place: not with --scene or --all")
    if reason and frames is None:
        raise click.UsageError("--reason is for --frames: why the frames are fixed")
    if api := remote.api(ctx):
        if frames is not None:
            remote.fix_frames(api, job_id, frames, reason)
            return
        remote.retry(api, job_id, every_unfinished=every_unfinished, scene=scene)
        return
    settings = command_settings(ctx).require_farm()
    if frames is not None:
        from farm.control.fixes import fix_frames

        fixing = fix_frames(settings, job_id, frames, reason=reason, by=getpass.getuser())
        click.echo(fixed_text(job_id, fixing.fix.to_json(), fixing.waiting))
        return
    from farm.control.jobs import check_retry, reopen

    if allow_path and scene is None:
        raise click.UsageError("--allow-path is for --scene: the files a fixed scene uses")
    fixed = None
    if scene is not None:
        check_retry(settings, job_id, every_unfinished=every_unfinished, scene=True)
        fixed = (scene, *trace_fixed_scene(scene, ctx.meta["config_path"], allow_path))
    reopened = reopen(settings, job_id, every_unfinished=every_unfinished, fixed=fixed)
    for index, why in sorted(reopened.remade.items()):
        click.echo(f"chunk {index} is made again: {why}")
    click.echo(f"requeued {job_id}: {len(reopened.waiting)} chunks waiting")


@cli.command()
@click.argument("job_id")
@click.option("--chunk", type=int, default=None, help="Only this chunk's attempts.")
@click.pass_context
def logs(ctx: click.Context, job_id: str, chunk: int | None) -> None:
    """Show each attempt's Blender/ffmpeg log from the object store."""
    if api := remote.api(ctx):
        remote.logs(api, job_id, chunk)
        return
    from farm.adapters.store import Store

    settings = command_settings(ctx).require_farm()
    Ledger.from_url(settings.redis_url).job_or_fail(job_id)
    store = Store.from_settings(settings)
    prefix = keys.job_prefix(job_id) + "logs/" + (f"{chunk:05d}-" if chunk is not None else "")
    found = store.keys(prefix)
    if not found:
        raise FarmError(f"no logs for {job_id}{'' if chunk is None else f' chunk {chunk}'} yet")
    for key in found:
        click.echo(f"===== {Path(key).name}")
        click.echo(printable(store.get_bytes(key).decode("utf-8", "replace").rstrip()))


cli.add_command(submit)
cli.add_command(login)  # farm login URL --token T, farm logout (farm/cli/login.py)
cli.add_command(logout)
cli.add_command(addon)  # farm addon --path: the Blender add-on's zip (farm/cli/addon.py)
cli.add_command(user_group)  # farm user add/list/revoke (farm/cli/users.py)
# pause, resume, priority, watch (farm/cli/control.py); up, down, worker, reconcile, flower, web,
# metrics (farm/cli/serve.py); project add/set, projects (farm/cli/projects.py)
for _command in (*CONTROL_COMMANDS, *SERVE_COMMANDS, *PROJECT_COMMANDS):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="farm")
