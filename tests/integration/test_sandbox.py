"""A hostile scene's Python run for real inside the render box (bubblewrap): Debian's Blender with
`--python-expr`, and the render script under the bpy wheel with a scene whose embedded script
autoruns (trusted job). Each attack is first shown to work unboxed, then to fail in the box."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from farm.adapters.proc import Result, run
from farm.adapters.sandbox import wrap
from farm.adapters.settings import Settings
from farm.blender import command as blender
from workers.host.box import render_box

ATTACK = """
import os, socket
def attempt(name, fn):
    try:
        fn()
        print("ATTACK", name, "ok", flush=True)
    except Exception as exc:
        print("ATTACK", name, "refused", type(exc).__name__, flush=True)
attempt("write-outside", lambda: open(OUTSIDE, "w").write("pwned"))
attempt("read-secret", lambda: print("SECRET", open(SECRET).read(), flush=True))
attempt("redis", lambda: socket.create_connection((HOST, PORT), timeout=3).close())
attempt("write-out-dir", lambda: open(OUT_DIR + "/mine.txt", "w").write("x"))
print("ENV", repr(os.environ.get("FARM_REDIS_URL")), repr(os.environ.get("AWS_SECRET_ACCESS_KEY")),
      flush=True)
"""


def attack_code(tmp: Path, redis_url: str, out_dir: Path) -> str:
    url = urlparse(redis_url)
    values = {
        "OUTSIDE": str(tmp / "outside.txt"),
        "SECRET": str(tmp / "secrets.json"),
        "HOST": url.hostname,
        "PORT": url.port,
        "OUT_DIR": str(out_dir),
    }
    return "".join(f"{k} = {v!r}\n" for k, v in values.items()) + ATTACK


@pytest.fixture
def chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> dict[str, Path]:
    """A worker's scratch: a secret beside the job, the chunk's workspace and output folder, and
    the worker's own credentials in its environment."""
    (tmp_path / "secrets.json").write_text('{"redis_password": "hunter2"}')
    monkeypatch.setenv("FARM_REDIS_URL", redis_url)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    paths = {
        "workspace": tmp_path / "jobs/j1/render-00000",
        "out_dir": tmp_path / "jobs/j1/frames",
        "tree": tmp_path / "jobs/j1/tree",
    }
    for path in paths.values():
        path.mkdir(parents=True)
    (paths["tree"] / "scene.blend").write_bytes(b"")
    return paths


def attacks(result: Result) -> dict[str, str]:
    found = {}
    for line in result.tail:
        if line.startswith("ATTACK "):
            _, name, outcome, *_ = line.split()
            found[name] = outcome
        if line.startswith(("ENV ", "SECRET ")):
            found[line.split()[0]] = line.split(" ", 1)[1]
    return found


def boxed(argv: list[str], chunk: dict[str, Path], blender_bin: str) -> list[str]:
    box = render_box(
        Settings(blender=blender_bin),
        workspace=chunk["workspace"],
        out_dir=chunk["out_dir"],
        scene=chunk["tree"] / "scene.blend",
        tree=True,
    )
    assert box is not None
    return wrap(argv, box)


def blender_expr(code: str) -> list[str]:
    return ["blender", "--background", "--factory-startup", "--python-expr", code]


def test_unboxed_blender_reaches_everything(
    chunk: dict[str, Path], tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same script without the box (and with the whole environment) succeeds,
    so the boxed test below proves the box, not a broken attack."""
    code = attack_code(tmp_path, redis_url, chunk["out_dir"])
    result = run(blender_expr(code), env=dict(os.environ), tail_lines=400)
    seen = attacks(result)
    assert seen["write-outside"] == "ok" and (tmp_path / "outside.txt").exists()
    assert seen["redis"] == "ok"
    assert "hunter2" in seen["SECRET"]
    assert redis_url in seen["ENV"]


def test_boxed_blender_cannot_write_read_or_connect_outside(
    chunk: dict[str, Path], tmp_path: Path, redis_url: str
) -> None:
    code = attack_code(tmp_path, redis_url, chunk["out_dir"])
    result = run(boxed(blender_expr(code), chunk, "blender"), tail_lines=400)
    seen = attacks(result)
    assert result.ok, "\n".join(result.tail)
    assert not (tmp_path / "outside.txt").exists()
    assert seen["read-secret"] == "refused" and "SECRET" not in seen
    assert seen["redis"] == "refused"
    assert seen["ENV"] == "None None"
    assert seen["write-out-dir"] == "ok" and (chunk["out_dir"] / "mine.txt").read_text() == "x"


def test_a_box_run_by_root_has_no_capabilities_to_undo_it(chunk: dict[str, Path]) -> None:
    """A worker running as root (this test machine's) starts bwrap as root: without the dropped
    capabilities a script could remount the read-only system and its tree writable, and root's
    owner bits read /etc/shadow."""
    probe = (
        "grep CapEff /proc/self/status; (cat /etc/shadow 2>/dev/null; true) | wc -c; "
        f"mount -o remount,bind,rw {chunk['tree']} && echo REMOUNTED; "
        f"touch {chunk['tree']}/planted && echo PLANTED; true"
    )
    result = run(boxed(["sh", "-c", probe], chunk, "blender"))
    assert result.ok, "\n".join(result.tail)
    assert "CapEff:\t0000000000000000" in result.tail
    assert "0" in result.tail  # /etc/shadow: nothing of it can be read inside
    assert "REMOUNTED" not in result.tail and "PLANTED" not in result.tail
    assert not (chunk["tree"] / "planted").exists()


def test_the_boxs_memory_backed_folders_are_capped_and_temporary_files_go_to_disk(
    chunk: dict[str, Path],
) -> None:
    """A script filling /tmp (RAM) would take the host's memory: it stops at the cap. Blender's
    and Python's temporary files go to TMPDIR, in the box's home on disk."""
    probe = (
        "dd if=/dev/zero of=/tmp/fill bs=1M count=400 2>/dev/null; du -m /tmp/fill | cut -f1; "
        'echo "TMPDIR=$TMPDIR"; touch "$TMPDIR/scratch" && echo TEMP-OK'
    )
    result = run(boxed(["sh", "-c", probe], chunk, "blender"))
    assert result.ok, "\n".join(result.tail)
    assert int(result.tail[0]) <= 256  # of 400 MB asked for
    assert f"TMPDIR={chunk['workspace']}/tmp" in result.tail and "TEMP-OK" in result.tail
    assert (chunk["workspace"] / "tmp" / "scratch").exists()


def test_box_refuses_to_render_without_bwrap(
    chunk: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from farm.core.errors import PermanentError

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PermanentError, match="FARM_SANDBOX=off"):
        render_box(
            Settings(),
            workspace=chunk["workspace"],
            out_dir=chunk["out_dir"],
            scene=chunk["tree"] / "scene.blend",
            tree=True,
        )
    off = render_box(
        Settings(sandbox="off"),
        workspace=chunk["workspace"],
        out_dir=chunk["out_dir"],
        scene=chunk["tree"] / "scene.blend",
        tree=True,
    )
    assert off is None


MAKE_SCENE = """
import sys, bpy
bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.data.scenes[0]
scene.render.resolution_x = scene.render.resolution_y = 8
scene.render.engine = "BLENDER_WORKBENCH"
scene.camera = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
scene.collection.objects.link(scene.camera)
text = bpy.data.texts.new("attack.py")
text.write(open(sys.argv[-2]).read())
text.use_module = True
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[-1])
"""


def test_trusted_scene_script_is_boxed_in_a_real_render(
    chunk: dict[str, Path], tmp_path: Path, redis_url: str
) -> None:
    """GIVEN a scene whose registered text block attacks when the file opens with scripts allowed
    (a trusted job), WHEN the render script renders it in the box with the bpy wheel, THEN the
    frame renders and every attack fails."""
    attack = tmp_path / "attack.py"
    attack.write_text(attack_code(tmp_path, redis_url, chunk["out_dir"]))
    scene = chunk["tree"] / "scene.blend"
    made = subprocess.run(
        [sys.executable, "-I", "-c", MAKE_SCENE, str(attack), str(scene)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    nonce = secrets.token_hex(16)
    job = blender.job_file(
        scene=scene,
        out_dir=chunk["out_dir"],
        frames=[1],
        settings=blender.RenderSettings(trusted=True),
        nonce=nonce,
    )
    job_path = chunk["workspace"] / "blender-job.json"
    job_path.write_text(json.dumps(job))
    argv = blender.script_argv(blender=blender.WHEEL, job_path=job_path, trusted=True)
    result = run(boxed(argv, chunk, blender.WHEEL), tail_lines=400)
    seen = attacks(result)
    assert result.ok, "\n".join(result.tail)
    assert seen, "the scene's script did not run:\n" + "\n".join(result.tail)
    assert not (tmp_path / "outside.txt").exists()
    assert seen["read-secret"] == "refused" and seen["redis"] == "refused"
    assert seen["ENV"] == "None None"
    assert (chunk["out_dir"] / "frame_000001.png").exists()


def test_stopping_a_boxed_program_stops_what_runs_inside(chunk: dict[str, Path]) -> None:
    """A lost lease or a spot notice stops the box: nothing inside it keeps running."""
    import contextlib
    import signal
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from farm.adapters.proc import Running

    marker = f"farm-box-test-{secrets.token_hex(4)}"
    handle = Running()
    # It says it runs, then sleeps for an hour: only the stop ends it within the waits below.
    code = "import time; print('RUNNING', flush=True); time.sleep(3600)"
    argv = boxed(["python3", "-c", code, marker], chunk, "blender")
    inside = threading.Event()

    def left() -> str:
        found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
        return found.stdout.strip()

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run, argv, handle=handle, on_line=lambda _: inside.set())
        try:
            assert inside.wait(120), "the boxed program never started"
            handle.stop()  # from another thread, as the lease keeper stops it
            result = running.result(timeout=120)
        finally:
            if not running.done() and handle.popen is not None:  # end it, so the test ends
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(handle.popen.pid, signal.SIGKILL)
    assert result.stopped
    deadline = time.monotonic() + 60  # the box's processes end as its namespace goes
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == "", "a process of the stopped box runs on"


def test_a_render_worker_without_bwrap_refuses_to_start(tmp_path: Path) -> None:
    """GIVEN a host whose PATH has Blender and ffmpeg but no bwrap, WHEN a render worker starts,
    THEN it exits at once saying how to fix it, before it could take a chunk."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("blender", "ffmpeg", "ffprobe"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    done = subprocess.run(
        [sys.executable, "-m", "workers", "--queues", "render", "--name", "nobox@test"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), "FARM_CONFIG": str(tmp_path / "c"),
             "FARM_REDIS_URL": "redis://127.0.0.1:1/0"},
        capture_output=True, text=True, timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 1
    assert "bwrap is not installed" in done.stderr and "FARM_SANDBOX=off" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_line_with_no_end_is_read_in_pieces_never_held_whole(tmp_path: Path) -> None:
    """Found by a review: a scene's script printing without a newline grew one line in the
    worker's memory for as long as it printed (the worker and its other chunks killed for it)."""
    from farm.adapters.proc import LINE_LIMIT

    longest: list[int] = []
    done = run(
        [sys.executable, "-c", "import sys; sys.stdout.write('x' * 1_000_000); print()"],
        on_line=lambda line: longest.append(len(line)),
        log_path=tmp_path / "log",
    )
    assert done.ok and max(longest) <= LINE_LIMIT and sum(longest) == 1_000_000
    assert (tmp_path / "log").stat().st_size == 1_000_001  # the log keeps every byte
