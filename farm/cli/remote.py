"""The CLI's API mode: where the config names an API URL and a token (`farm login`), the commands
talk to the farm's API (farm.adapters.farmapi) and this machine holds no Redis password and no
store key. The scene is read and traced, or the master probed, here as in direct mode; its files
go up by presigned PUT, outputs and logs come down by presigned GET, progress comes as events.

farm.cli.main, submit and control branch here at the top of each command. Nothing here imports
farm.cli.submit, which imports this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import click

from farm.adapters.farmapi import APIUnreachable, FarmAPI
from farm.adapters.settings import Settings, command_settings, default_config_path, load_settings
from farm.cli.waits import STOPS, say_stop, stopped_waiting, unwritable
from farm.core.cost import money
from farm.core.errors import ConfigError, FarmError
from farm.core.fixes import not_kept_yet
from farm.core.pipeline import waiting_for
from farm.core.report import (
    advance,
    fixed_text,
    jobs_table,
    printable,
    progress_bar,
    progress_line,
    to_text,
)
from farm.core.siblings import video_stem
from farm.core.spec import JobKind, JobSpec, provenance
from farm.core.state import JobState
from farm.core.tiles import PASSES_EXT, is_tiled

if TYPE_CHECKING:
    from farm.blender.assets import Traced

UPLOAD_THREADS = 8
RECONNECTS = 5
"""Times a broken events stream is opened again (a server restarting) before the wait gives up."""

FARM_ONLY = {
    "up": "starts a farm on this machine",
    "down": "stops a farm on this machine",
    "worker": "runs a worker, which needs the farm's Redis and store credentials",
    "reconcile": "reads and repairs the ledger with the farm's credentials",
    "web": "serves the API with the farm's credentials",
    "flower": "reads the broker with the farm's credentials",
    "metrics": "reads the ledger with the farm's credentials",
    "store-security": "writes the store's own keys",
    "watch": "reads the ledger directly (through the API, `farm status JOB --wait` follows a "
    "job and `farm jobs` lists them)",
}
"""Commands that run only with the farm's own credentials, and why: in API mode they say so."""


def client(settings: Settings) -> FarmAPI | None:
    """The API these settings name, or None for direct mode (no api_url; or an api_url beside a
    farm's own Redis address and no token: a farm host)."""
    if not settings.api_url:
        return None
    if not settings.api_token:
        if settings.redis_url:
            return None
        raise ConfigError(
            f"not logged in to {settings.api_url}: `farm login {settings.api_url} --token TOKEN` "
            "with a token from the farm's admin (`farm user add`)"
        )
    return FarmAPI(settings.api_url, settings.api_token, settings.ca_file)


def api(ctx: click.Context) -> FarmAPI | None:
    """The API of the command's settings, or None for direct mode."""
    return client(command_settings(ctx))


def refuse_farm_only(ctx: click.Context, name: str | None, args: list[str]) -> None:
    """In API mode, a command that needs the farm's own credentials stops here, saying so (its
    --help still shows)."""
    if name not in FARM_ONLY or "--help" in args or ctx.resilient_parsing:
        return
    config = ctx.params.get("config_path") or default_config_path(os.environ)
    try:
        found = client(load_settings(config_path=config))
    except ConfigError:
        return  # the command reports its own settings' trouble
    if found is not None:
        raise ConfigError(
            f"`farm {name}` {FARM_ONLY[name]}: it runs on the farm's own hosts with their config, "
            f"not through the API this machine is logged in to ({found.url}); run it there, or "
            "name the farm's config with --config or FARM_CONFIG"
        )


# --- submit ----------------------------------------------------------------------------------


def submit(
    api: FarmAPI,
    specs: Sequence[JobSpec],
    path: Path,
    traced: Traced | None,
    *,
    priority: int,
    max_cost: float | None,
    notify: str | None,
    wait: bool,
    as_json: bool,
    estimate: bool,
    project: str | None = None,
) -> int:
    """`farm submit` through the API, once the scene is read and traced (or the master probed)
    here: the files the store lacks go up once, then the job (or its estimate), or each of
    `--each`'s siblings (farm.core.siblings). The exit code."""
    source = {"sha256": _sha256(path), "size": path.stat().st_size,
              "suffix": path.suffix.lower() or ".bin"}  # fmt: skip
    _upload(api, path, source, traced)

    def body(spec: JobSpec) -> dict[str, Any]:
        return {
            "spec": spec.to_json(),
            "source": source,
            "assets": traced.manifest.to_json() if traced else None,
            "priority": priority,
            "max_cost": max_cost,
            "notify": notify,
            "project": project,
        }

    if estimate:
        if not as_json:
            click.echo("estimating (a short probe job runs if the farm has no timings of this "
                       "scene)", err=True)  # fmt: skip
        _print_estimate(api.estimate(body(specs[0])), as_json)
        return 0
    made = [(spec, api.submit(body(spec))) for spec in specs]
    if not wait:
        if as_json:
            answers = [{**done, "settings": provenance(spec)} for spec, done in made]
            click.echo(json.dumps(grouped_json(specs, answers)))
        else:
            for _spec, done in made:
                click.echo(str(done["id"]))
        return 0
    if not as_json:
        for spec, done in made:
            member = f" ({printable(spec.group.member)})" if spec.group else ""
            click.echo(f"job {done['id']}{member}: {done['frames_total']} frames in "
                       f"{done['chunks_total']} chunks", err=True)  # fmt: skip
    summaries = []
    for spec, done in made:
        job_id = str(done["id"])
        summary = follow(api, job_id, quiet=as_json)
        summaries.append({**summary, "settings": provenance(spec)})
        if not as_json and summary["state"] == "done":
            click.echo(f"done: {summary['output']}  (farm fetch {job_id} DEST)")
    if as_json:
        click.echo(json.dumps(grouped_json(specs, summaries)))
    return 0 if all(s["state"] == "done" for s in summaries) else 1


def grouped_json(specs: Sequence[JobSpec], answers: list[dict[str, Any]]) -> dict[str, Any]:
    """`submit --json`: a job's object as before, or for siblings the group and every job's."""
    group = specs[0].group
    if group is None:
        return answers[0]
    jobs = [{**answer, "member": spec.group.member if spec.group else ""}
            for spec, answer in zip(specs, answers, strict=True)]  # fmt: skip
    return {"group": group.id, "each": str(group.each), "jobs": jobs}


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _upload(api: FarmAPI, path: Path, source: dict[str, Any], traced: Traced | None) -> None:
    """Ask which files the store lacks and PUT those, eight at a time, each streamed."""
    local = {source["sha256"]: path}
    files = [{**source, "kind": "scene"}]
    assets, found = (traced.manifest.assets, traced.local) if traced is not None else ((), {})
    for asset in assets:
        if asset.sha256 not in local:
            local[asset.sha256] = found[asset.path]
            files.append({"sha256": asset.sha256, "size": asset.size_bytes, "kind": "asset",
                          "suffix": PurePosixPath(asset.path).suffix.lower()})  # fmt: skip
    wanted = api.uploads(files)["uploads"]
    with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
        list(
            pool.map(lambda u: api.put_file(u["url"], local[u["sha256"]], u.get("headers")), wanted)
        )


def _print_estimate(found: dict[str, Any], as_json: bool) -> None:
    """What direct mode's `submit --estimate` prints, from the API's answer."""
    if as_json:
        click.echo(json.dumps(found))
        return
    f = found
    click.echo(f"frames      {f['frames']} in {f['chunks']} chunks of {f['chunk_size']} "
               f"({f['reason']})")  # fmt: skip
    click.echo(f"timings     {f['startup_s']:.2f} s per chunk + {f['frame_s']:.3f} s per frame "
               f"({f['timings'] or 'remembered'})")  # fmt: skip
    click.echo(f"GPU-hours   {f['gpu_hours_on_demand']:.3f} on demand, "
               f"{f['gpu_hours_spot']:.3f} on spot (reclaimed work included)")  # fmt: skip
    click.echo(f"time        {f['time_s'] / 60:.1f} min on {f['workers']} workers")
    click.echo(f"cost        {money(f['cost_spot'])} spot, {money(f['cost_on_demand'])} on demand; "
               f"{f['priced_as']}")  # fmt: skip
    if f.get("probe_job"):
        click.echo(f"probe       job {f['probe_job']}: {money(f['probe_cost'])}, "
                   f"{f['probe_s']:.0f} s (its timings are remembered for this scene)")  # fmt: skip


# --- following a job --------------------------------------------------------------------------


def follow(api: FarmAPI, job_id: str, *, quiet: bool) -> dict[str, Any]:
    """Follow the job's events until it ends or pauses, drawn as direct mode draws its wait (a
    live bar on a terminal, a line per change in a log); the last summary."""
    tty = sys.stderr.isatty() and not quiet
    bar = progress_bar()
    task = bar.add_task("job", total=1, state="", chunks="", elapsed="", eta="")
    if tty:
        bar.start()
    try:
        summary = _events_until_stop(api, job_id, bar if tty else None, task, quiet)
    except KeyboardInterrupt:
        if tty:
            bar.stop()
        raise stopped_waiting(job_id) from None
    finally:
        if tty:
            bar.stop()
    if quiet or summary["state"] == JobState.DONE:
        return summary
    say_stop(job_id, summary, str(summary.get("paused_reason") or "paused"))
    return summary


def _events_until_stop(
    api: FarmAPI, job_id: str, bar: Any, task: Any, quiet: bool
) -> dict[str, Any]:
    """The summaries of the job's events, shown, until one stops the wait; a stream that breaks
    (the server restarting) is opened again, RECONNECTS times in a row at most."""
    last: tuple[object, ...] = ()
    broken = 0
    while True:
        try:
            with contextlib.closing(api.events(job_id)) as events:
                for event, summary in events:
                    if not isinstance(summary, dict):
                        continue
                    broken = 0
                    if bar is not None:
                        advance(bar, task, summary)
                    elif not quiet and (step := _step(summary)) != last:
                        click.echo(progress_line(summary), err=True)
                        last = step
                    if event == "end" or summary["state"] in STOPS:
                        return summary
        except APIUnreachable:
            if broken >= RECONNECTS:
                raise
        broken += 1
        time.sleep(min(2.0**broken, 30.0))


def _step(summary: dict[str, Any]) -> tuple[object, ...]:
    """What a log line is written for, as in direct mode: state, chunks or frames changed."""
    return tuple(summary[k] for k in ("state", "chunks_done", "chunks_total", "frames_rendered"))


# --- the other commands ------------------------------------------------------------------------


def status(api: FarmAPI, job_id: str, *, wait: bool, quiet: bool) -> dict[str, Any]:
    """`farm status`'s summary through the API, after following the job with `wait` (farm.cli.main
    prints it)."""
    if wait:
        follow(api, job_id, quiet=quiet)
    return api.job(job_id)


def jobs(api: FarmAPI, limit: int, as_json: bool) -> None:
    rows = api.jobs(limit)
    click.echo(json.dumps(rows) if as_json else to_text(jobs_table(rows)))


def _waiting(summary: dict[str, Any]) -> int:
    """The job's chunks that wait for a worker (queued, interrupted, rendered for an encode)."""
    kind = JobKind.parse(summary.get("kind") or "render")
    return sum(1 for c in summary.get("chunks", []) if waiting_for(kind, c["state"]) is not None)


def pause(api: FarmAPI, job_id: str) -> None:
    api.pause(job_id)
    click.echo(f"paused {job_id}; running chunks finish; `farm resume {job_id}`")


def resume(api: FarmAPI, job_id: str, max_cost: float | None) -> None:
    summary = api.resume(job_id, max_cost)
    if summary.get("state") == "waiting":  # paused while it waited: it waits for its parents again
        click.echo(f"resumed {job_id}: waiting for its parents again (`farm status {job_id}`)")
        return
    sent = summary.get("sent", _waiting(summary))  # the chunks the resume sent, as direct says
    click.echo(f"resumed {job_id}: {sent} chunks waiting")
    c = summary.get("cost") or {}
    budget = c.get("max_cost") or 0.0
    if budget and c["spent"] + c["expected_to_finish"] > budget:
        click.echo(
            f"warning: spent {money(c['spent'])} + expected {money(c['expected_to_finish'])} "
            f"passes the budget {money(budget)}; it will pause again before its next chunk "
            "(raise it with --max-cost)",
            err=True,
        )


def cancel(api: FarmAPI, job_id: str) -> None:
    summary = api.cancel(job_id)
    left = int(summary["chunks_total"]) - int(summary["chunks_done"])
    click.echo(
        f"cancelled {job_id} ({left} unfinished chunks); `farm retry {job_id} --all` resumes it"
    )


def retry(api: FarmAPI, job_id: str, *, every_unfinished: bool, scene: Path | None) -> None:
    if scene is not None:
        raise FarmError(
            "`farm retry --scene` is not available through the API yet: submit the fixed scene "
            "as a new job (`farm submit`), or ask a wrangler on a farm host to retry it with it"
        )
    summary = api.retry(job_id, every_unfinished=every_unfinished)
    click.echo(f"requeued {job_id}: {_waiting(summary)} chunks waiting")


def fix_frames(api: FarmAPI, job_id: str, frames: str, reason: str) -> None:
    """`farm retry --frames` through the API: the farm parses and checks the list."""
    answer = api.fix_frames(job_id, frames, reason)
    click.echo(fixed_text(job_id, answer["fix"], list(answer.get("waiting", ()))))


def priority(api: FarmAPI, job_id: str, value: int) -> None:
    summary = api.priority(job_id, value)
    click.echo(f"{job_id}: priority {value} ({_waiting(summary)} waiting chunks re-sent)")


def logs(api: FarmAPI, job_id: str, chunk: int | None) -> None:
    found = api.logs(job_id, chunk)
    if not found:
        raise FarmError(f"no logs for {job_id}{'' if chunk is None else f' chunk {chunk}'} yet")
    for item in found:
        click.echo(f"===== {printable(PurePosixPath(str(item['name'])).name)}")
        text = api.get_bytes(item["url"]).decode("utf-8", "replace").rstrip()
        click.echo(printable(text))


def fetch(
    api: FarmAPI, job_id: str, dest_text: str, with_frames: bool, version: int | None = None
) -> None:
    """`farm fetch` through the API: the same checks and places as direct mode (the frames
    named by the farm as the scene names them), each file streamed from a presigned URL to
    disk. `version`: an earlier video, kept when frames were fixed."""
    status = api.job(job_id)
    state = status["state"]
    partial = state in ("failed", "cancelled", "paused") and with_frames and version is None
    if state != "done" and not partial and version is None:
        raise FarmError(
            f"job {job_id} is {state}; its video exists once it is done "
            "(`--frames` fetches the frames done so far of a failed, cancelled or paused job)"
        )
    found = api.output(job_id, frames=with_frames, version=version)
    video = found.get("video")
    ext = PurePosixPath(str(video["name"])).suffix if video else ".mp4"
    dest = Path(dest_text)
    folder = dest.is_dir() or dest_text.endswith(("/", os.sep))
    # A sibling's (--each) is shot.CamB, as in direct mode (farm.core.siblings).
    name = video_stem(job_id, status.get("spec")) if version is None else f"{job_id}.v{version}"
    target = dest / f"{name}{ext}" if folder else dest
    try:
        if not partial:
            if not video and version is not None:
                raise FarmError(not_kept_yet(job_id, version))
            if not video:
                raise FarmError(f"job {job_id} is done but the farm lists no video for it")
            api.get_file(video["url"], target, int(video["size"]))
            click.echo(str(target))
            if passes := found.get("passes"):  # a tiled still's, beside its image
                where = target.with_name(f"{target.stem}.{PASSES_EXT}")
                api.get_file(passes["url"], where, int(passes["size"]))
                click.echo(str(where))
            elif is_tiled(status.get("spec")):
                click.echo(f"{job_id}: its still has no passes file", err=True)
            if found.get("package"):  # a ladder's HLS/DASH, beside the video, as in direct mode
                from farm.control.packages import fetch_files, package_files

                package = target.with_name(target.stem + "-package")
                files = package_files({"files": {f["name"]: f for f in found["package"]}})
                urls = {str(f["name"]): str(f["url"]) for f in found["package"]}
                fetch_files(files, package,
                            lambda file, path: api.get_file(urls[file.name], path, file.size))  # fmt: skip
                click.echo(str(package))
        if with_frames:
            frames_dir = (dest if folder else dest.parent) / f"{job_id}-frames"
            if not found.get("frames"):  # a transcode, or a job that failed before its first frame
                raise FarmError(f"job {job_id} has no frames in the store")
            if found.get("note"):  # why the frames keep the farm's names
                click.echo(printable(str(found["note"])), err=True)
            for frame in found["frames"]:
                where = frames_dir.joinpath(*_relative(str(frame["name"])).parts)
                api.get_file(frame["url"], where, int(frame["size"]))
            click.echo(str(frames_dir))
    except OSError as exc:
        raise unwritable(exc, target) from exc


def _relative(name: str) -> PurePosixPath:
    """A file name the API listed, as a path inside the frames folder: never above it."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise FarmError(f"the farm listed an output file with a bad name ({printable(name)!r})")
    return path
