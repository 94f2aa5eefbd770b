"""CPU seconds by who spent them: each of a local farm's servers and workers with every process
under it, and the benchmark itself. On a machine the farm shares with its store and broker, a
rate that is CPU-bound is explained by where the CPU went, not by wall time.

Read from /proc: a process's user and system time plus what its reaped children spent (a child
that ended is counted in its parent's cumulative times), summed over each group's process tree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
SELF = "bench"
"""The group of this process and its children (the Celery client, the in-process chunks)."""


def _processes() -> dict[int, tuple[int, float]]:
    """pid: (parent pid, CPU seconds of it and its reaped children) for every live process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:  # bytes: a process's name (before the last ')') may be anything
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
            # After the name: state, ppid, ..., then utime, stime, cutime, cstime (proc(5)'s
            # fields 14 to 17, here 11 to 14).
            ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
            out[int(entry.name)] = (int(fields[1]), ticks / TICK)
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
    return out


def sample(roots: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process tree (`roots`: name -> pid), this benchmark's
    own (SELF), and everything else on the machine ('other')."""
    procs = _processes()
    owner = {pid: name for name, pid in roots.items()}
    owner[os.getpid()] = SELF
    totals = dict.fromkeys([*roots, SELF, "other"], 0.0)
    for pid, (_parent, seconds) in procs.items():
        seen, at = set(), pid
        while at not in owner and at in procs and at not in seen and at > 1:
            seen.add(at)
            at = procs[at][0]
        totals[owner.get(at, "other")] += seconds
    return totals


def spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds each group spent between two samples (never below 0: a process that ended
    unreaped takes its time with it)."""
    return {name: max(after[name] - before.get(name, 0.0), 0.0) for name in after}
