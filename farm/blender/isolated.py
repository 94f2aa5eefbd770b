"""Reading an untrusted .blend in a child process: a memory cap, a timeout, and a temp dir the
parent removes, so a .blend bomb costs the submitting machine a bounded amount and leaves nothing.

A fork rather than a new interpreter: the child starts with farm and BAT already imported, which
costs milliseconds where `python -m` costs a few hundred (`farm submit` reads every scene so).
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import re
import resource
import shutil
import tempfile
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from farm.core.errors import FarmError, SpecError

T = TypeVar("T")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def run_isolated(
    fn: Callable[..., T], *args: Any, what: Path, memory_bytes: int, timeout_s: float
) -> T:
    """`fn(*args)` in a forked child whose address space may grow by `memory_bytes` and that is
    killed after `timeout_s`; its FarmError is raised here, its result returned. `what`: the file
    read, for the messages."""
    scratch = Path(tempfile.mkdtemp(prefix="farm-read-"))
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_child, args=(send, scratch, memory_bytes, fn, args), daemon=True
    )
    try:
        child.start()
        send.close()
        if not receive.poll(timeout_s):
            raise SpecError(
                f"{what}: reading the .blend file took over {timeout_s:g} s, and was stopped; "
                "if the scene is real, raise FARM_BLEND_PARSE_TIMEOUT_S"
            )
        try:
            outcome, value = receive.recv()
        except EOFError:  # the child died without a word: killed (the OOM killer), or crashed
            child.join()
            raise SpecError(
                f"{what}: reading the .blend file failed (the reader stopped with exit code "
                f"{child.exitcode}, under a memory cap of {memory_bytes // (1024 * 1024):,} MiB); "
                "save the scene again, or raise FARM_BLEND_PARSE_MEMORY_MB"
            ) from None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        if child.pid is not None:
            child.join()
        shutil.rmtree(scratch, ignore_errors=True)
    if outcome == "memory":
        raise SpecError(
            f"{what}: reading the .blend file needed more memory than its cap "
            f"({memory_bytes // (1024 * 1024):,} MiB); if the scene is real, raise "
            "FARM_BLEND_PARSE_MEMORY_MB"
        )
    if outcome == "error":
        raise value
    result: T = value
    return result


def _child(
    send: Connection, scratch: Path, memory_bytes: int, fn: Callable[..., Any], args: Any
) -> None:
    """In the child: temp files in `scratch`, the address space capped above what the fork
    inherited, then the work; its answer (or its FarmError) goes back through `send`."""
    # What the fork inherited is the parent's: collecting it here would run its finalizers (a
    # temp file's removal) in the child's name.
    gc.freeze()
    tempfile.tempdir = str(scratch)
    limit = int(Path("/proc/self/statm").read_text().split()[0]) * _PAGE + memory_bytes
    with contextlib.suppress(ValueError, OSError):  # a hard limit already lower: keep it
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Room kept to say what happened: a read that ran out of memory leaves none to read
    # /proc/self/status or to pickle the answer with, and the child then died without a word.
    reserve: bytearray | None = bytearray(_RESERVE_BYTES)
    try:
        answer: tuple[str, Any] = ("ok", fn(*args))
    except Exception as exc:
        reserve = None
        if _exhausted(exc, limit):
            answer = ("memory", None)
        elif isinstance(exc, FarmError):
            answer = ("error", exc)
        else:  # anything else in the reader is a damaged file, said plainly
            answer = ("error", SpecError(f"reading the .blend file failed: {exc!r}"))
    del reserve
    try:
        send.send(answer)
    except MemoryError:
        send.send(("memory", None))
    finally:
        send.close()


_NEAR_LIMIT_BYTES = 64 * 1024 * 1024
_RESERVE_BYTES = 4 * 1024 * 1024


def _exhausted(exc: BaseException, limit: int) -> bool:
    """Whether the read failed for want of memory: a MemoryError somewhere in the chain (BAT's
    errors are wrapped on the way), or, where a C library said it otherwise (zstd: a
    SystemError), an address space that had grown to within 64 MiB of the cap."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError):
            return True
        seen = seen.__cause__ or seen.__context__
    status = Path("/proc/self/status").read_text()
    peak = re.search(r"^VmPeak:\s+(\d+) kB", status, re.MULTILINE)
    return peak is not None and int(peak.group(1)) * 1024 > limit - _NEAR_LIMIT_BYTES
