"""farm_blender: submit the open scene to a farm from Blender, price it first, follow its progress.

A client of the farm's API, as the `farm` CLI is, and through it: Estimate and Submit save the file
and run `farm submit FILE [--estimate] --json` with the preferences' API URL, token and CA file in
its environment, so the scene is traced and uploaded as the CLI traces and uploads it, by the same
code (client.py). `farm submit` runs on a thread (tracing and uploading a scene's files can take
minutes), and the panel (Render Properties) follows the job with GET /api/v1/jobs/{id}, each
request on a thread too: one bpy.app.timers callback collects their answers, so Blender's UI never
waits on the farm. Saving the file, which must happen in Blender's own thread, is all an operator
does before it returns.

Runs inside Blender and imports nothing of the farm (Blender's Python has none); `farm addon --path`
builds the zip it is installed from, with built.json naming the `farm` that built it. Blender's
classes have no type stubs: each subclass below is marked for mypy.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import bpy

from .client import Access, FarmFailed, Refused, fetch_job, find_farm, run_submit

bl_info = {
    "name": "Farm",
    "author": "farm",
    "version": (0, 1, 0),
    "blender": (4, 2, 0),
    "location": "Properties > Render > Farm",
    "description": "Submit the open scene to a render farm, see its estimate, follow its progress",
    "category": "Render",
}

POLL_S = 2.0
"""Between two requests for the followed job's state."""
CHECK_S = 0.2
"""Between two looks at a request in flight."""
ENDED = frozenset({"done", "failed", "cancelled"})
"""The job states that never change again (farm.core.state.ENDED)."""
GIVE_UP = frozenset({401, 403, 404, 426})
"""API answers that asking again will not change (a token refused, a job gone, a client too old)."""


class Followed:
    """What the panel shows: the last estimate, the last job submitted from this Blender (what
    `farm submit` answered and its latest summary from the API), and the last problem met."""

    def __init__(self) -> None:
        self.estimate: dict[str, Any] = {}
        self.submitted: dict[str, Any] = {}
        self.job_id = ""
        self.summary: dict[str, Any] = {}
        self.message = ""
        self.request: Future[dict[str, Any]] | None = None
        """The follow request in flight."""
        self.asking: Future[dict[str, Any]] | None = None
        """The `farm submit` in flight (Estimate's or Submit's), which the panel says it waits
        on; no other starts meanwhile."""
        self.asking_for = ""
        """What `asking` is: "estimate" or "submit"."""


FOLLOWED = Followed()
_POOL: ThreadPoolExecutor | None = None
_SUBMITS: ThreadPoolExecutor | None = None


def preferences(context: Any) -> Any:
    """This add-on's preferences (FarmPreferences)."""
    return context.preferences.addons[__package__].preferences


def access(prefs: Any) -> Access:
    return Access.checked(str(prefs.api_url), str(prefs.api_token), str(prefs.ca_file))


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm_blender")
    return _POOL


def _submits() -> ThreadPoolExecutor:
    """Where `farm submit` runs: its own thread, so a long upload does not hold up the requests
    that follow the job submitted before."""
    global _SUBMITS
    if _SUBMITS is None:
        _SUBMITS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm_blender-submit")
    return _SUBMITS


def _collect_asking() -> None:
    """The answer of the `farm submit` that ended: the estimate shown, or the job followed; a
    refusal shown in the panel (the operator returned long before)."""
    asking, what = FOLLOWED.asking, FOLLOWED.asking_for
    FOLLOWED.asking, FOLLOWED.asking_for = None, ""
    assert asking is not None
    try:
        answer = asking.result()
    except FarmFailed as exc:
        FOLLOWED.message = str(exc)
        _redraw()
        return
    FOLLOWED.message = ""
    if what == "estimate":
        FOLLOWED.estimate = answer
    else:
        FOLLOWED.submitted = answer
        FOLLOWED.job_id, FOLLOWED.summary = str(answer["id"]), {**answer, "frames_rendered": 0}
    _redraw()


def poll() -> float | None:
    """The bpy.app.timers callback: collects the `farm submit` in flight once it ends, and
    follows FOLLOWED.job_id: collects the answer of the request in flight, starts the next one,
    and ends (None) once nothing is asked and the job has ended, or the API refuses in a way
    asking again will not change. A headless caller calls it in a loop, sleeping the seconds it
    returns."""
    if FOLLOWED.asking is not None:
        if not FOLLOWED.asking.done():
            return CHECK_S
        _collect_asking()
    request = FOLLOWED.request
    if request is not None:
        if not request.done():
            return CHECK_S
        FOLLOWED.request = None
        try:
            summary = request.result()
        except Refused as exc:
            FOLLOWED.message = str(exc)
            _redraw()
            return None if exc.status in GIVE_UP else POLL_S
        except FarmFailed as exc:
            FOLLOWED.message = str(exc)
            _redraw()
            return POLL_S
        if summary.get("id") == FOLLOWED.job_id:  # not the job followed before a new submit
            FOLLOWED.summary, FOLLOWED.message = summary, ""
            _redraw()
            if summary.get("state") in ENDED:
                return None
        return POLL_S
    if not FOLLOWED.job_id:
        return None
    try:
        asking = access(preferences(bpy.context))
    except FarmFailed as exc:
        FOLLOWED.message = str(exc)
        _redraw()
        return None
    FOLLOWED.request = _pool().submit(fetch_job, asking, FOLLOWED.job_id)
    return CHECK_S


def _timer() -> None:
    """Start the timer that collects and follows, unless it runs."""
    if not bpy.app.timers.is_registered(poll):
        # persistent: opening another file does not stop following the job
        bpy.app.timers.register(poll, first_interval=CHECK_S, persistent=True)


def _redraw() -> None:
    """Ask the Properties editors to draw the panel again (none headless)."""
    manager = getattr(bpy.context, "window_manager", None)
    for window in getattr(manager, "windows", ()):
        for area in window.screen.areas:
            if area.type == "PROPERTIES":
                area.tag_redraw()


def money(value: float) -> str:
    """$0.0042 for small sums, $12.35 otherwise (as the CLI prints them)."""
    return f"${value:.4f}" if abs(value) < 1 else f"${value:,.2f}"


def estimate_lines(estimate: dict[str, Any]) -> list[str]:
    """The estimate as the panel shows it: frames and chunks, GPU-hours, cost, time."""
    if not estimate:
        return []
    return [
        f"Frames: {estimate['frames']} in {estimate['chunks']} chunks of {estimate['chunk_size']}",
        f"GPU-hours: {estimate['gpu_hours_spot']:.4f} spot, "
        f"{estimate['gpu_hours_on_demand']:.4f} on demand",
        f"Cost: {money(estimate['cost_spot'])} spot, {money(estimate['cost_on_demand'])} on demand",
        f"Time: {estimate['time_s'] / 60:.1f} min on {estimate.get('workers', '?')} workers",
    ]


def progress(summary: dict[str, Any]) -> tuple[int, int]:
    """Frames rendered and frames in all, from a job's summary."""
    return int(summary.get("frames_rendered", 0) or 0), int(summary.get("frames_total", 0) or 0)


def files_line(submitted: dict[str, Any]) -> str:
    """The scene's files as submit traced them: how many went up, how many the farm had."""
    files = submitted.get("assets") or {}
    if not files.get("files"):
        return ""
    return (
        f"Files: {files['files']} ({files.get('uploaded', 0)} uploaded, "
        f"{files.get('reused', 0)} already on the farm)"
    )


def saved_blend() -> str:
    """Save the open file and give its path; an unsaved new file is refused (the farm renders
    what is on disk, under the file's own name)."""
    if not bpy.data.filepath:
        raise FarmFailed(
            "save the scene as a .blend file first (File > Save As): the farm renders the saved file"
        )
    try:
        bpy.ops.wm.save_mainfile()
    except RuntimeError as exc:
        raise FarmFailed(f"cannot save {bpy.data.filepath}: {exc}") from exc
    return str(bpy.data.filepath)


def ask_farm(operator: Any, context: Any, what: str, *flags: str) -> set[str]:
    """Save the open scene and start `farm submit` on it with `flags`, as the preferences' user,
    on its own thread; the timer collects its answer (`what`: "estimate" or "submit"). What is
    wrong before it starts (an unsaved file, no token) is refused at once."""
    try:
        prefs = preferences(context)
        asking = access(prefs)
        farm = find_farm(str(prefs.farm_command))
        blend = saved_blend()
    except FarmFailed as exc:
        FOLLOWED.message = str(exc)
        operator.report({"ERROR"}, str(exc))
        return {"CANCELLED"}
    FOLLOWED.asking = _submits().submit(run_submit, farm, asking, blend, *flags)
    FOLLOWED.asking_for, FOLLOWED.message = what, ""
    _timer()
    _redraw()
    operator.report({"INFO"}, f"{ASKING[what]} {bpy.path.basename(blend)}")
    return {"FINISHED"}


ASKING = {"estimate": "Estimating", "submit": "Submitting"}
"""What the panel says while a `farm submit` of each kind runs."""


class FARM_OT_estimate(bpy.types.Operator):  # type: ignore[misc]
    """Save the scene and ask the farm what it would take to render: frames, chunks, GPU-hours
    and cost (a short probe job runs first when the farm has no timings of the scene)"""

    bl_idname = "farm.estimate"
    bl_label = "Estimate"

    @classmethod
    def poll(cls, context: Any) -> bool:
        return FOLLOWED.asking is None  # one `farm submit` at a time

    def execute(self, context: Any) -> set[str]:
        return ask_farm(self, context, "estimate", "--estimate")


class FARM_OT_submit(bpy.types.Operator):  # type: ignore[misc]
    """Save the scene and submit it to the farm, its files traced and uploaded as `farm submit`
    does; the panel follows the job"""

    bl_idname = "farm.submit"
    bl_label = "Submit to Farm"

    @classmethod
    def poll(cls, context: Any) -> bool:
        return FOLLOWED.asking is None  # one `farm submit` at a time

    def execute(self, context: Any) -> set[str]:
        return ask_farm(self, context, "submit")


class FARM_PT_render(bpy.types.Panel):  # type: ignore[misc]
    """Render Properties > Farm: Estimate and Submit, then the job's state and progress."""

    bl_label = "Farm"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "render"

    def draw(self, context: Any) -> None:
        layout = self.layout
        prefs = preferences(context)
        if not (str(prefs.api_url).strip() and str(prefs.api_token).strip()):
            layout.label(text="Set the API URL and token in the add-on's preferences", icon="ERROR")
        row = layout.row(align=True)
        row.operator(FARM_OT_estimate.bl_idname, icon="INFO")
        row.operator(FARM_OT_submit.bl_idname, icon="RENDER_ANIMATION")
        if FOLLOWED.asking is not None:  # the buttons are greyed out meanwhile (their poll)
            layout.label(text=f"{ASKING[FOLLOWED.asking_for]}: tracing and uploading the scene",
                         icon="SORTTIME")  # fmt: skip
        if FOLLOWED.estimate:
            column = layout.column(align=True)
            for line in estimate_lines(FOLLOWED.estimate):
                column.label(text=line)
        if FOLLOWED.job_id:
            box = layout.box()
            summary = FOLLOWED.summary
            box.label(text=f"Job {FOLLOWED.job_id}: {summary.get('state', '?')}")
            if files := files_line(FOLLOWED.submitted):
                box.label(text=files)
            done, total = progress(summary)
            box.progress(factor=done / total if total else 0.0, text=f"{done} / {total} frames")
            if summary.get("error"):
                box.label(text=str(summary["error"]), icon="ERROR")
        if FOLLOWED.message:
            layout.label(text=FOLLOWED.message, icon="ERROR")


class FarmPreferences(bpy.types.AddonPreferences):  # type: ignore[misc]
    """Where the farm's API is and who you are on it."""

    bl_idname = __package__
    # Blender reads a class's properties from its annotations; written as the dict they make,
    # they stay values that type checkers accept.
    __annotations__ = {
        "api_url": bpy.props.StringProperty(
            name="API URL",
            description="The farm's address, as `farm up` prints it (e.g. https://farm:8443)",
        ),
        "api_token": bpy.props.StringProperty(
            name="Token",
            description="Your token on the farm (`farm user add NAME` prints it once)",
            subtype="PASSWORD",
        ),
        "ca_file": bpy.props.StringProperty(
            name="CA file",
            description="The CA that signed the farm's certificate, when it is its own "
            "(empty: the system's)",
            subtype="FILE_PATH",
        ),
        "farm_command": bpy.props.StringProperty(
            name="farm command",
            description="The `farm` program that submits (empty: the one that built this "
            "add-on, else `farm` on PATH)",
            subtype="FILE_PATH",
        ),
    }

    def draw(self, context: Any) -> None:
        layout = self.layout
        layout.prop(self, "api_url")
        layout.prop(self, "api_token")
        layout.prop(self, "ca_file")
        layout.prop(self, "farm_command")
        if not str(self.farm_command).strip():
            try:
                layout.label(text=f"Submits with {find_farm('')}")
            except FarmFailed as exc:
                layout.label(text=str(exc), icon="ERROR")


CLASSES = (FarmPreferences, FARM_OT_estimate, FARM_OT_submit, FARM_PT_render)


def register() -> None:
    for cls in CLASSES:
        bpy.utils.register_class(cls)


def unregister() -> None:
    global _POOL, _SUBMITS
    if bpy.app.timers.is_registered(poll):
        bpy.app.timers.unregister(poll)
    for pool in (_POOL, _SUBMITS):
        if pool is not None:  # a `farm submit` under way goes on to its end, unheard
            pool.shutdown(wait=False, cancel_futures=True)
    _POOL = _SUBMITS = None
    FOLLOWED.request = FOLLOWED.asking = None
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
