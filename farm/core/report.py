"""How a job looks to a person: the status summary, the progress bar and the tables (rich)."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Callable
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.segment import Segment
from rich.table import Table

from farm.core import preview
from farm.core.cost import money
from farm.core.fixes import Fix, frames_text
from farm.core.pipeline import running_states
from farm.core.state import ENDED


def _f(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its control characters (but newline and tab) written out as `\\x1b`: a
    scene's object names, paths and Blender's errors reach a terminal through logs, errors and
    views, and an escape sequence in one would move the cursor, rewrite what is shown or set the
    clipboard of whoever reads it."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Printable:
    """A renderable drawn with its text through `printable`: for a live view (farm watch),
    whose frames go straight to the terminal, not through to_text."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.inner, options):
            yield Segment(printable(segment.text), segment.style, segment.control)


def chunk_summary(chunk: dict[str, str]) -> dict[str, Any]:
    frames = json.loads(chunk.get("frames", "[]"))
    started, finished = _f(chunk.get("started")), _f(chunk.get("finished"))
    return {
        "index": int(chunk.get("index", 0)),
        "state": chunk.get("state", ""),
        "frames": f"{frames[0]}-{frames[-1]}" if frames else "",
        "frame_count": len(frames),
        "frames_rendered": int(chunk.get("frames_rendered", 0) or 0),
        "worker": chunk.get("worker", ""),
        "attempt": int(chunk.get("attempt", 0) or 0),
        "failures": int(chunk.get("failures", 0) or 0),
        "interruptions": int(chunk.get("interruptions", 0) or 0),
        "duration_s": round(finished - started, 2) if started and finished else None,
        "render_s": _f(chunk.get("render_s")),
        "encode_s": _f(chunk.get("encode_s")),
        "score_s": _f(chunk.get("score_s")),
        "encoder": chunk.get("encoder", ""),
        # A transcoded segment's score against its master (farm.media.quality) and, under
        # --target-quality, the CRF/CQ its probes chose.
        "ssim": _f(chunk.get("ssim")),
        "psnr_db": _f(chunk.get("psnr_db")),
        "vmaf": _f(chunk.get("vmaf")),  # where the job asked for VMAF
        "quality": int(chunk["quality"]) if chunk.get("quality") else None,
        "rungs": chunk_rungs(chunk),  # a ladder's: each rendition's score, rung order
        "error": chunk.get("error", ""),
    }


def chunk_rungs(chunk: dict[str, str]) -> list[dict[str, float]]:
    """A ladder chunk's score per rendition (workers.phases.ladder.rung_fields); [] otherwise.
    The chunk's own `ssim` and `psnr_db` are then its worst rendition's."""
    ssim, psnr = chunk.get("rungs_ssim"), chunk.get("rungs_psnr_db")
    if not ssim or not psnr:
        return []
    pairs = zip(ssim.split(","), psnr.split(","), strict=True)
    return [{"ssim": float(a), "psnr_db": float(b)} for a, b in pairs]


def job_summary(
    job: dict[str, str], chunks: list[dict[str, str]], now: float | None = None
) -> dict[str, Any]:
    now = now or time.time()
    created, finished = _f(job.get("created")), _f(job.get("finished"))
    elapsed = round((finished or now) - created, 2) if created else None
    chunk_list = [chunk_summary(c) for c in chunks]
    running = any(c["state"] in running_states() for c in chunk_list)
    paused = paused_s(job, finished or now, running=running)
    waited = waited_s(job, finished or now)
    spec = json.loads(job.get("spec", "{}"))
    return {
        "id": job.get("id", ""),
        "kind": job.get("kind", ""),
        "state": job.get("state", ""),
        "owner": job.get("owner", ""),
        "project": job.get("project", ""),
        "chunks_total": int(job.get("chunks_total", 0)),
        "chunks_done": int(job.get("chunks_done", 0)),
        "frames_total": int(job.get("frames_total", 0)),
        "frames_rendered": sum(min(c["frames_rendered"], c["frame_count"]) for c in chunk_list),
        "output": job.get("output", ""),
        "package": job.get("package", ""),
        "chunk_size": job.get("chunk_size", ""),
        "chunk_plan": job.get("chunk_plan", ""),
        "error": job.get("error", ""),
        "spec": spec,
        "group": spec.get("group") or None,
        "created": created,
        "elapsed_s": elapsed,
        "paused_s": paused,
        "waited_s": waited,
        "active_s": None if elapsed is None else round(max(elapsed - paused - waited, 0.0), 2),
        "first_frame_s": _since(created, job.get("first_frame_at")),
        "first_thumbnail_s": _since(created, job.get("first_thumbnail_at")),
        "fixes": _fixes(job),
        "flagged": _flagged(chunks),
        "preview": preview_summary(job, chunks),
        "quality": job_quality(chunks),
        "chunks": chunk_list,
    }


def _fixes(job: dict[str, str]) -> list[dict[str, Any]]:
    """The job's frame fixes (farm.core.fixes.Fix as JSON), oldest first."""
    try:
        found = json.loads(job.get("fixes") or "[]")
    except ValueError:
        return []
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def _flagged(chunks: list[dict[str, str]]) -> dict[str, str]:
    """Frames `--check-frames` flagged (the chunks' `flagged` fields), frame -> why, in order."""
    found: dict[int, str] = {}
    for chunk in chunks:
        try:
            flags = json.loads(chunk.get("flagged") or "{}")
        except ValueError:
            continue
        if isinstance(flags, dict):
            found |= {int(f): str(why) for f, why in flags.items() if str(f).isdigit()}
    return {str(f): found[f] for f in sorted(found)}


def flagged_lines(summary: dict[str, Any]) -> list[str]:
    """The frames `--check-frames` flagged, and the command that renders them again."""
    flagged = summary.get("flagged") or {}
    if not flagged:
        return []
    named = ", ".join(f"{f} ({why})" for f, why in flagged.items())
    fix = f"farm retry {summary['id']} --frames {frames_text(int(f) for f in flagged)}"
    return [f"flagged frames {named}", f"        fix them: {fix}"]


def fixed_text(job_id: str, fix: dict[str, Any], waiting: list[int]) -> str:
    """What `farm retry --frames` says, in both modes."""
    shown = Fix.from_json(fix)
    made, output = (
        ("their tiles again and the merge makes the still again", "still")
        if shown.still else ("them again and encode their segments again", "video")
    )  # fmt: skip
    kept = f"; the {output} so far is kept as version {shown.version}" if shown.version else ""
    return (
        f"fixing {job_id} frames {shown.shown} ({shown.reason}): chunks "
        f"{', '.join(map(str, shown.chunks))} render {made}{kept}; {len(waiting)} chunks waiting"
    )


def fix_lines(summary: dict[str, Any]) -> list[str]:
    """Each fix of the job's frames (when, by whom, why) and the video versions it kept."""
    lines = []
    for fix in summary.get("fixes", ()):
        at = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(fix.get("at") or 0)))
        frames = Fix.from_json(fix).shown
        lines.append(f"fixed   frames {frames} at {at} by {fix.get('by', '')}: "
                     f"{fix.get('reason', '')}")  # fmt: skip
        if fix.get("version"):
            lines.append(f"version {fix['version']} {fix.get('version_key', '')} (before frames "
                         f"{frames} were fixed; `fetch --version {fix['version']}`)")  # fmt: skip
    return lines


def paused_s(job: dict[str, str], now: float, *, running: bool = False) -> float:
    """Seconds the job has stood still for a pause: its earlier pauses (the ledger adds each as
    the job leaves 'paused') and, while paused, the one it is in, each counted from the later of
    the pause and the end of the last attempt that ran on after it (the ledger's _pause.lua).
    `running`: a chunk still runs, so the pause it is in has not stood the job still yet (none
    starts during a pause: it has run all along, and the ledger adds nothing if it still runs at
    the resume)."""
    total = _f(job.get("paused_s")) or 0.0
    since = _f(job.get("paused"))
    if job.get("state") == "paused" and since and not running:
        total += max(now - max(since, _f(job.get("held_end")) or 0.0), 0.0)
    return round(total, 2)


def waited_s(job: dict[str, str], now: float) -> float:
    """Seconds the job waited for its parents (`farm submit --after`) before it was released:
    not time it ran, so its pace and ETA leave it out as they leave out a pause."""
    created, released = _f(job.get("created")), _f(job.get("released"))
    if not created:
        return 0.0
    if released:
        return round(max(released - created, 0.0), 2)
    return round(max(now - created, 0.0), 2) if job.get("state") == "waiting" else 0.0


def _since(created: float | None, at: str | None) -> float | None:
    """Seconds from submit to `at` (a ledger timestamp), if both are known."""
    when = _f(at)
    return round(when - created, 2) if created and when else None


def eta_s(summary: dict[str, Any]) -> float | None:
    """Time to go at the pace so far: the job's time running (paused time left out: a job
    paused overnight and resumed has not become slower) over the frames it rendered."""
    done, total = int(summary["frames_rendered"]), int(summary["frames_total"])
    running = float(summary.get("active_s", summary["elapsed_s"]) or 0)
    if not done or not running or done >= total or summary["state"] not in ("queued", "running"):
        return None  # a paused job has no end until someone resumes it; an ended one has ended
    return running * (total - done) / done


def elapsed_text(
    summary: dict[str, Any], clock: Callable[[float | None], str] | None = None
) -> str:
    """'01:05', or '01:05 (paused 00:30)' for a job that was or is paused (`clock`: how a
    time is written; this module's by default)."""
    clock = clock or terminal_clock
    paused = float(summary.get("paused_s") or 0)
    text = clock(summary["elapsed_s"])
    return f"{text} (paused {clock(paused)})" if paused >= 1 else text


def terminal_clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return (
        f"{seconds // 60:02d}:{seconds % 60:02d}"
        if seconds < 3600
        else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    )


def to_text(renderable: RenderableType, width: int = 120) -> str:
    """What rich draws, as plain text (no colour codes): for pipes, logs and tests."""
    out = io.StringIO()
    # markup=False: scene names and error text are the .blend's, and "[/b]" in one is no tag.
    Console(file=out, width=width, color_system=None, soft_wrap=False, markup=False).print(
        renderable
    )
    return printable("\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines()))


def progress_line(summary: dict[str, Any]) -> str:
    """One line for logs (not a terminal): where the job is, with elapsed time and ETA."""
    return (
        f"{summary['state']:<9} chunks {summary['chunks_done']}/{summary['chunks_total']}"
        f"  frames {summary['frames_rendered']}/{max(summary['frames_total'], 1)}"
        f"  elapsed {elapsed_text(summary)}  eta {terminal_clock(eta_s(summary))}"
    )


def progress_bar() -> Progress:
    """The live bar of `submit --wait` on a terminal; `advance(progress, task, summary)` moves it."""
    return Progress(
        TextColumn("{task.fields[state]:<9}"),
        BarColumn(),
        TextColumn("chunks {task.fields[chunks]}"),
        TextColumn("frames {task.completed:.0f}/{task.total:.0f}"),
        TextColumn("elapsed {task.fields[elapsed]}  eta {task.fields[eta]}"),
        transient=False,
    )


def advance(progress: Progress, task: TaskID, summary: dict[str, Any]) -> None:
    progress.update(
        task,
        total=max(summary["frames_total"], 1),
        completed=summary["frames_rendered"],
        state=summary["state"],
        chunks=f"{summary['chunks_done']}/{summary['chunks_total']}",
        elapsed=elapsed_text(summary),
        eta=terminal_clock(eta_s(summary)),
    )


def status_table(summary: dict[str, Any]) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_row(f"job {summary['id']}", summary["kind"], summary["state"])
    lines: list[RenderableType] = [
        head,
        f"chunks {summary['chunks_done']}/{summary['chunks_total']} done, frames "
        f"{summary['frames_rendered']}/{summary['frames_total']} rendered, elapsed "
        f"{elapsed_text(summary)}",
    ]
    if tiles := summary["spec"].get("tiles"):  # farm.core.tiles: each chunk renders one tile
        lines.append(f"still: frame {summary['spec'].get('tile_frame')} in {tiles} tiles (a "
                     "chunk a tile, a frame here a tile), merged into one image")  # fmt: skip
    if summary.get("first_frame_s") is not None:
        first = f"first   frame in the store {summary['first_frame_s']:.1f} s after submit"
        if summary.get("first_thumbnail_s") is not None:
            first += f", its thumbnail {summary['first_thumbnail_s']:.1f} s"
        lines.append(first)
    if summary["output"]:
        lines.append(f"output  {summary['output']}")
    if summary.get("package"):  # a ladder's HLS/DASH package (farm.media.package)
        lines.append(f"package {summary['package']} ({summary['spec'].get('package')}, "
                     f"{len(summary['spec'].get('ladder') or [])} renditions)")  # fmt: skip
    if summary.get("chunk_plan"):
        lines.append(f"chunk size {summary['chunk_size']}: {summary['chunk_plan']}")
    if summary.get("cost"):
        lines.append(cost_line(summary))
    lines += chain_lines(summary)
    lines += group_lines(summary)
    lines += preview_lines(summary)
    lines += fix_lines(summary)
    lines += flagged_lines(summary)
    lines += quality_lines(summary)
    if summary.get("paused_reason"):
        lines.append(f"paused  {summary['paused_reason']}")
    if summary["error"]:
        lines.append(f"error   {summary['error']}")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name, justify in (("chunk", "right"), ("frames", "left"), ("state", "left"),
                          ("try", "right"), ("time", "right"), ("worker", "left"),
                          ("last error", "left")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    scored = any(c.get("ssim") is not None for c in summary["chunks"])
    if scored:
        table.add_column("ssim / psnr / crf", justify="right")
    vmaf = any(c.get("vmaf") is not None for c in summary["chunks"])
    if vmaf:
        table.add_column("vmaf", justify="right")
    for c in summary["chunks"]:
        dur = f"{c['duration_s']:.1f}s" if c["duration_s"] is not None else ""
        error = c["error"].splitlines()[0][:100] if c["error"] and c["state"] != "done" else ""
        table.add_row(str(c["index"]), c["frames"], c["state"], str(c["attempt"]), dur,
                      c["worker"], error, *((chunk_score_text(c),) if scored else ()),
                      *((vmaf_text(c),) if vmaf else ()))  # fmt: skip
    lines.append(table)
    return Group(*lines)


def preview_summary(job: dict[str, str], chunks: list[dict[str, str]]) -> dict[str, Any] | None:
    """A previewed job's preview (`farm submit --preview N [--hold]`): its frames, those stored,
    the chunks that render them, whether it holds after them, is held now or was released, and
    the estimate of the rest from their timings. None for a job without a preview."""
    shown = preview.frames_of(job)
    if not shown:
        return None
    wanted = set(shown)
    ran = [c for c in chunks if (f := json.loads(c.get("frames") or "[]")) and set(f) <= wanted]
    done = [f for c in ran if c.get("state") == "done" for f in json.loads(c["frames"])]
    return {
        "frames": shown,
        "frames_done": sorted(done),
        "chunks": sorted(int(c.get("index", 0)) for c in ran),
        "hold": job.get(preview.HOLD) == "1",
        "held": job.get("state") == "held",
        "released": bool(job.get(preview.HOLD_RELEASED)),
        "rest_estimate": json.loads(job.get(preview.REST_ESTIMATE) or "{}") or None,
    }


def preview_lines(summary: dict[str, Any]) -> list[str]:
    """The preview's frames and, for a held job, how to render the rest and what it would take."""
    shown = summary.get("preview")
    if not shown:
        return []
    frames = ", ".join(str(f) for f in shown["frames"])
    lines = [f"preview frames {frames} first: {len(shown['frames_done'])}/"
             f"{len(shown['frames'])} done"]  # fmt: skip
    if shown["held"]:
        lines.append(f"held: `farm resume {summary['id']}` renders the rest "
                     f"(`farm cancel {summary['id']}` drops it)")  # fmt: skip
        est = shown.get("rest_estimate")
        if est:
            lines.append(
                f"the rest  {est['frames']} frames in {est['chunks']} chunks, about "
                f"{terminal_clock(est['time_s'])} and {money(est['cost'])} (from the preview's "
                f"{est['frame_s']:.2f} s a frame)"
            )
        else:
            lines.append("the rest  no estimate: the preview's timings are not known")
    elif shown["hold"] and not shown["released"]:
        lines.append("holds after its preview frames (`farm resume` renders the rest then)")
    return lines


def chain_lines(summary: dict[str, Any]) -> list[str]:
    """`farm status`: the jobs this one waits (or waited) for, with their states, and those
    that wait for it (farm.control.depends.chain)."""
    lines = []
    if parents := summary.get("after"):
        listed = ", ".join(f"{p['id']} ({p['state']})" for p in parents)
        how = "to end" if summary.get("after_mode") == "any" else "to be done"
        if summary["state"] == "waiting":
            lines.append(f"waits   for {listed} {how}")
        elif summary.get("released"):
            lines.append(f"after   {listed}: released")
        else:
            lines.append(f"after   {listed}")
    if children := summary.get("children"):
        listed = ", ".join(f"{c['id']} ({c['state']})" for c in children)
        lines.append(f"then    {listed} wait{'s' if len(children) == 1 else ''} for it")
    return [printable(line) for line in lines]


def group_lines(summary: dict[str, Any]) -> list[str]:
    """`farm status`: the `--each` group the job is one of, what it renders, and its siblings."""
    group = summary.get("group")
    if not group:
        return []
    lines = [f"group   {group['id']}: one job per {group['each']}, this one {group['member']}"]
    if siblings := summary.get("siblings"):
        listed = ", ".join(f"{s['id']} ({s['member']}, {s['state']})" for s in siblings)
        lines.append(f"siblings {listed}")
    return [printable(line) for line in lines]


def jobs_table(rows: list[dict[str, Any]]) -> Table:
    """`farm jobs`: a sibling of `farm submit --each` shows what it renders and its group (the
    end of the group's id, which `farm status` shows whole)."""
    grouped = any(row.get("group") for row in rows)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    names = ("job", "kind", "state", "chunks", "frames", "source", *(("group",) if grouped else ()),
             "cost", "wasted")  # fmt: skip
    for name in names:
        table.add_column(name, justify="right" if name in ("cost", "wasted") else "left")
    for row in rows:
        spent = row.get("cost") or {}
        group = row.get("group") or {}
        source = row["spec"].get("source_name", "")
        if group:
            source = f"{source} ({group.get('member', '')})"
        # The group's own part of its id (g-…-3fa9c1): the whole one would squeeze the job ids.
        shown = (str(group.get("id", "")).rsplit("-", 1)[-1] if group else "",) if grouped else ()
        table.add_row(row["id"], row["kind"], row["state"],
                      f"{row['chunks_done']}/{row['chunks_total']}", str(row["frames_total"]),
                      printable(source), *shown,
                      money(spent.get("spent", 0.0)), money(spent.get("wasted", 0.0)))  # fmt: skip
    return table


def cost_line(summary: dict[str, Any]) -> str:
    """`farm status`: spent and wasted; expected to finish (money and time); the budget."""
    c = summary["cost"]
    running = f" ({money(c['running'])} of it running now)" if c.get("running") else ""
    line = (
        f"cost    {money(c['spent'])} spent{running}, {money(c['wasted'])} wasted "
        f"({c['wasted_attempts']}/{c['attempts']} attempts), {money(c['startup'])} start-up"
    )
    if summary["state"] not in ENDED:  # an ended job has nothing to go
        line += (
            f"\nto go   {money(c['expected_to_finish'])} and {terminal_clock(eta_s(summary))} "
            f"expected, {money(c['expected_total'])} in all"
        )
    if c.get("max_cost"):
        line += f"; budget {money(c['max_cost'])}"
    return line


def job_quality(chunks: list[dict[str, str]]) -> dict[str, Any] | None:
    """A transcode's worst and mean segment SSIM and PSNR over the chunks scored, or None
    (farm.media.quality scores each segment on its worker); VMAF's too where it was scored,
    with the model that scored it."""
    ssim = [float(c["ssim"]) for c in chunks if c.get("ssim")]
    psnr = [float(c["psnr_db"]) for c in chunks if c.get("psnr_db")]
    if not ssim or not psnr:
        return None
    rungs = rung_quality([chunk_rungs(c) for c in chunks if c.get("rungs_ssim")])
    vmaf = [float(c["vmaf"]) for c in chunks if c.get("vmaf")]
    models = sorted({c.get("vmaf_model") or "vmaf_v0.6.1" for c in chunks if c.get("vmaf")})
    return {
        **_worst_mean({"ssim": ssim, "psnr": psnr, "vmaf": vmaf}),
        "chunks_scored": len(ssim),
        **({"vmaf_model": ", ".join(models)} if vmaf else {}),
        **({"rungs": rungs} if rungs else {}),  # a ladder's, per rendition
    }


def rung_quality(chunks: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """A ladder's worst and mean SSIM and PSNR per rendition over its chunks ([] for no ladder)."""
    per_rung = list(zip(*chunks, strict=True)) if chunks else []
    return [
        _worst_mean({"ssim": [s["ssim"] for s in scores], "psnr": [s["psnr_db"] for s in scores]})
        for scores in per_rung
    ]


_DIGITS = {"ssim": 6, "psnr": 3, "vmaf": 3}
_UNIT = {"psnr": "_db"}


def _worst_mean(scores: dict[str, list[float]]) -> dict[str, float]:
    """`ssim_worst`, `ssim_mean`, `psnr_worst_db`, ...: each metric's lowest and mean score,
    for the metrics scored (an empty list is left out)."""
    found: dict[str, float] = {}
    for metric, values in scores.items():
        if values:
            unit = _UNIT.get(metric, "")
            found[f"{metric}_worst{unit}"] = min(values)
            found[f"{metric}_mean{unit}"] = round(sum(values) / len(values), _DIGITS[metric])
    return found


def chunk_score_text(chunk: dict[str, Any]) -> str:
    """`0.9871 / 41.2 dB / 23`: a chunk's SSIM, PSNR and, under --target-quality, its CRF/CQ."""
    if chunk.get("ssim") is None:
        return ""
    if chunk.get("rungs"):  # a ladder's: every rendition, rung order
        return "  ".join(f"r{n} {r['ssim']:.4f}/{r['psnr_db']:.1f}" for n, r in
                         enumerate(chunk["rungs"]))  # fmt: skip
    crf = f" / {chunk['quality']}" if chunk.get("quality") is not None else ""
    return f"{chunk['ssim']:.4f} / {chunk['psnr_db']:.1f} dB{crf}"


def vmaf_text(chunk: dict[str, Any]) -> str:
    """`93.21`: a chunk's VMAF, '' where it has none (yet)."""
    return f"{chunk['vmaf']:.2f}" if chunk.get("vmaf") is not None else ""


def quality_lines(summary: dict[str, Any]) -> list[str]:
    """`farm status`: a transcode's worst and mean segment score, and its target if any."""
    q = summary.get("quality")
    if not q:
        return []
    target = (summary.get("spec") or {}).get("target_quality")
    aim = f"; target {target}, each chunk's CRF/CQ chosen on probes" if target else ""
    vmaf = (
        f", VMAF worst {q['vmaf_worst']:.2f} mean {q['vmaf_mean']:.2f} ({q['vmaf_model']})"
        if "vmaf_worst" in q else ""
    )  # fmt: skip
    return [
        f"quality SSIM worst {q['ssim_worst']:.4f} mean {q['ssim_mean']:.4f}, PSNR worst "
        f"{q['psnr_worst_db']:.1f} dB mean {q['psnr_mean_db']:.1f} dB{vmaf} over "
        f"{q['chunks_scored']} segments{aim}"
        + (" (each its worst rendition)" if q.get("rungs") else "")
    ] + [
        f"  rung {rung_name(summary, n)}: SSIM worst {r['ssim_worst']:.4f} mean {r['ssim_mean']:.4f}"
        f", PSNR worst {r['psnr_worst_db']:.1f} dB mean {r['psnr_mean_db']:.1f} dB"
        for n, r in enumerate(q.get("rungs") or [])
    ]


def rung_name(summary: dict[str, Any], n: int) -> str:
    """`640x360@800k`: the spec's rung n as `--ladder` writes it."""
    rungs = (summary.get("spec") or {}).get("ladder") or []
    if n >= len(rungs):
        return f"r{n}"
    r = rungs[n]
    return f"{r['width']}x{r['height']}@{r['bitrate_kbps']}k"
