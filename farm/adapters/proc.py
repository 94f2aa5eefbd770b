"""The one place that runs external programs (Blender, ffmpeg, ffprobe, the farm's servers).

Each child runs in its own session so the whole process group can be stopped: SIGTERM first (the
notify), then SIGKILL after a grace period (the terminate), as openjd-sessions does. Children get
a minimal environment (PATH, locale, GPU selection, HOME) unless the caller passes one: never the
worker's FARM_*/AWS_* secrets.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import resource
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from farm.adapters.sandbox import minimal_env
from farm.core.errors import PermanentError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelPolicy:
    """How a running program is stopped: SIGTERM, then SIGKILL after `terminate_delay_s`."""

    terminate_delay_s: float = 5.0


@dataclass(slots=True, kw_only=True)
class Result:
    argv: list[str]
    returncode: int
    tail: list[str]
    duration_s: float
    stopped: bool = False
    """True when the program was stopped on purpose (cancel, lease lost, interruption)."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.stopped


@dataclass(slots=True)
class Running:
    """A handle to stop a running program from another thread."""

    popen: subprocess.Popen[bytes] | None = None
    stop_requested: threading.Event = field(default_factory=threading.Event)
    policy: CancelPolicy = field(default_factory=CancelPolicy)
    handler_failed: str = ""
    """Why the handler of the program's output failed, which stopped it (pump): a failure of
    the work, never the interruption a stop asked for by a person or a drain would be."""

    def stop(self) -> None:
        self.stop_requested.set()
        popen = self.popen  # once: a warm Blender's runner lets go of it from another thread
        if popen is not None and popen.poll() is None:
            stop_group(popen.pid, self.policy.terminate_delay_s)


def stop_group(pid: int, terminate_delay_s: float) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after the delay."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return

    def _kill() -> None:
        deadline = time.monotonic() + terminate_delay_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    threading.Thread(target=_kill, daemon=True).start()


_PR_SET_PDEATHSIG = 1


def _child_setup(limit_bytes: int) -> Callable[[], None]:
    """In the child before exec: die with the worker (a killed worker must not leave Blender
    rendering and holding the GPU), and cap the address space when asked, so a runaway
    allocation fails in the child instead of starving the host."""

    def apply() -> None:
        # Not Linux: no prctl, and the process-group stop still applies.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


def child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """A child's environment: `env` as given, or else an allowlist of this process's (PATH,
    locale, GPU selection, HOME), never the worker's FARM_*/AWS_*/Redis secrets."""
    if env is not None:
        return dict(env)
    return minimal_env(os.environ, os.environ.get("HOME", ""))


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    memory_limit_bytes: int = 0,
    stdin_pipe: bool = False,
) -> subprocess.Popen[bytes]:
    """Start a program in its own session, stdout and stderr on one pipe, dying with this
    process. `stdin_pipe`: its stdin a pipe to write to (workers.host.serving keeps one running
    between chunks, handing it job files there), else empty."""
    try:
        return subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            start_new_session=True,
            env=child_env(env),
            cwd=cwd,
            preexec_fn=_child_setup(memory_limit_bytes),
        )
    except FileNotFoundError as exc:
        raise PermanentError(f"{argv[0]} is not installed or not on PATH") from exc


def run(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None] | None = None,
    log_path: Path | None = None,
    handle: Running | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    tail_lines: int = 60,
    memory_limit_bytes: int = 0,
) -> Result:
    """Run a program to the end, streaming each output line to `on_line` and `log_path`."""
    handle = handle or Running()
    tail: deque[str] = deque(maxlen=tail_lines)
    started = time.monotonic()
    popen = spawn(argv, env=env, cwd=cwd, memory_limit_bytes=memory_limit_bytes)
    handle.popen = popen
    if handle.stop_requested.is_set():
        handle.stop()
    try:
        assert popen.stdout is not None
        pump(lines_of(popen.stdout), on_line=on_line, log_path=log_path, tail=tail, handle=handle)
        returncode = popen.wait()
    finally:
        if popen.poll() is None:
            stop_group(popen.pid, 0)
    return Result(
        argv=list(argv),
        returncode=returncode,
        tail=list(tail),
        duration_s=time.monotonic() - started,
        stopped=handle.stop_requested.is_set(),
    )


LINE_LIMIT = 64 << 10
"""The longest line read from a program at once; a longer one comes in pieces. A scene's
script printing gigabytes with no newline would otherwise be held whole in this process."""


def lines_of(stream: IO[bytes]) -> Iterator[bytes]:
    """A program's output, line by line, no line longer than LINE_LIMIT."""
    return iter(lambda: stream.readline(LINE_LIMIT), b"")


def pump(
    lines: Iterable[bytes],
    *,
    on_line: Callable[[str], None] | None,
    log_path: Path | None,
    tail: deque[str],
    handle: Running,
    until: str = "",
) -> bool:
    """Each output line to the log, the tail and `on_line` (a handler that fails stops the
    program: `handle`), to the end of `lines` or to a line holding `until` (then True; it goes
    to the log and the tail only)."""
    log_file = log_path.open("ab") if log_path else None
    try:
        for raw in lines:
            if log_file:
                log_file.write(raw)
            line = raw.decode("utf-8", "replace").rstrip()
            tail.append(line)
            if until and until in line:
                return True
            if on_line is not None:
                try:
                    on_line(line)
                except Exception as exc:
                    log.exception("output handler failed on %r; stopping the program", line)
                    handle.handler_failed = handle.handler_failed or f"{exc!r} on {line[:200]!r}"
                    handle.stop()
        return False
    finally:
        if log_file:
            log_file.close()


CompletedProcess = subprocess.CompletedProcess
"""What `capture` returns."""
Timeout = subprocess.TimeoutExpired
"""What `capture` raises when the program outlives its timeout (so callers need not import
subprocess: this module alone does)."""


def capture(
    argv: Sequence[str], timeout_s: float = 60.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a short program and return its output (probes: ffprobe, nvidia-smi, bwrap's trials);
    past `timeout_s` it is killed and `Timeout` raised."""
    try:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
            env=child_env(env),
        )
    except FileNotFoundError as exc:
        raise PermanentError(f"{argv[0]} is not installed or not on PATH") from exc


def spawn_daemon(
    argv: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None
) -> int:
    """Start a long-running server detached from this terminal; return its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        try:
            popen = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=child_env(env),
                umask=0o077,  # the farm's servers write data, logs and AOF for their owner only
            )
        except FileNotFoundError as exc:
            raise PermanentError(f"{argv[0]} is not installed or not on PATH") from exc
    return popen.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot, Linux /proc), or None when it is gone or
    this is not Linux: with the pid, it names one process, never a later one given the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_process(pid: int, started: int | None) -> bool:
    """True when `pid` is alive and is the process that started at `started` (None: unknown)."""
    if not alive(pid):
        return False
    if started is None:
        return True
    return start_time(pid) == started
