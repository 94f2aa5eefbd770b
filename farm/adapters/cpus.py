"""CPU sets for the workers that share one host.

Two Blenders on the same cores fight: each one's thread pool (TBB: scene sync, BVH builds, image
saving) sizes itself to every core of the host, whatever `--threads` says for the render itself,
and the pools preempt each other. `farm up --workers N` therefore gives each worker its own share
of the cores, whole physical cores together (hyperthread siblings) and one socket's cores before
the next, and each worker pins itself (and so its Blender) to its share.

A CPU list is written as Linux writes them (`taskset -c`, `/sys/.../cpulist`): `0-3,8,10-11`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from farm.core.errors import ConfigError

SYSFS = Path("/sys/devices/system/cpu")


def parse(text: str) -> tuple[int, ...]:
    """`0-3,8` -> (0, 1, 2, 3, 8); a clear error for anything else."""
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ConfigError(
                f"CPU list {text!r}: {part!r} is not a CPU number or a range such as 0-3; "
                "write it as taskset -c does, for example 0-3,8"
            ) from None
        if first < 0 or last < first:
            raise ConfigError(f"CPU list {text!r}: {part!r} is not a range of CPU numbers")
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def format_list(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 3, 8) -> `0-3,8`."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def available() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity, which a container's cpuset narrows)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def _topology_key(cpu: int, sysfs: Path) -> tuple[int, int, int]:
    """(socket, first CPU of its physical core, cpu): siblings sort together, sockets apart."""
    top = sysfs / f"cpu{cpu}" / "topology"
    try:
        package = int((top / "physical_package_id").read_text())
        siblings = parse((top / "thread_siblings_list").read_text().strip())
    except (OSError, ValueError, ConfigError):
        return (0, cpu, cpu)
    return (package, min(siblings), cpu)


def split(cpus: Sequence[int], parts: int, sysfs: Path = SYSFS) -> list[tuple[int, ...]]:
    """`cpus` in `parts` disjoint shares whose sizes differ by at most one, each made of whole
    physical cores where the count allows. Needs at least one CPU per part."""
    if parts < 1 or parts > len(cpus):
        raise ValueError(f"cannot give {parts} workers their own CPUs out of {len(cpus)}")
    ordered = sorted(cpus, key=lambda c: _topology_key(c, sysfs))
    size, extra = divmod(len(ordered), parts)
    shares, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        shares.append(tuple(sorted(ordered[start:end])))
        start = end
    return shares


def pin(cpus: Sequence[int]) -> None:
    """Run this thread, and every thread and child it starts from now on, on `cpus` only. Call it
    before the process starts any thread: Linux sets the affinity of the calling thread."""
    wanted = set(cpus)
    allowed = set(available())
    if not wanted <= allowed:
        raise ConfigError(
            f"--cpus {format_list(wanted)}: CPUs {format_list(wanted - allowed)} are not "
            f"available to this process (it may use {format_list(allowed)})"
        )
    os.sched_setaffinity(0, wanted)
