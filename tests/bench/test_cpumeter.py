"""The benchmarks' CPU meter, on real processes: CPU spent by a process tree is counted to the
tree's root, a child's included while it runs and once it has ended, and nothing to a tree that
only sleeps."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench import cpumeter

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"
# The child burns 0.3 s, says so (a file), burns 0.3 s more. The root waits for the go file,
# starts the child, waits for it without burning anything itself (the first 0.3 s counted to the
# root can only be its child's), then says it is done and sleeps on.
CHILD = BURN.format(s=0.3) + "open(__import__('sys').argv[1], 'w').close()\n" + BURN.format(s=0.3)
TREE = f"""import os, subprocess, sys, time
open(sys.argv[1] + '.up', 'w').close()
while not os.path.exists(sys.argv[1]): time.sleep(0.01)
subprocess.Popen([sys.executable, '-c', {CHILD!r}, sys.argv[1] + '.half']).wait()
open(sys.argv[1] + '.done', 'w').close()
time.sleep(60)
"""
IDLE = "import sys, time\nopen(sys.argv[1], 'w').close()\ntime.sleep(60)\n"


def _wait_for(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.01)


def test_the_cpu_a_tree_spends_is_counted_to_its_root(tmp_path: Path) -> None:
    go = tmp_path / "go"
    busy = subprocess.Popen([sys.executable, "-c", TREE, str(go)])
    idle = subprocess.Popen([sys.executable, "-c", IDLE, str(tmp_path / "idle.up")])
    try:
        _wait_for(tmp_path / "go.up")  # both interpreters have started
        _wait_for(tmp_path / "idle.up")
        roots = {"busy": busy.pid, "idle": idle.pid}
        before = cpumeter.sample(roots)
        go.touch()
        _wait_for(tmp_path / "go.half")  # the child, still running, has burnt 0.3 s
        assert cpumeter.spent(before, cpumeter.sample(roots))["busy"] >= 0.25
        _wait_for(tmp_path / "go.done")  # the child ended and its parent reaped it
        used = cpumeter.spent(before, cpumeter.sample(roots))
    finally:
        for process in (busy, idle):
            process.kill()
            process.wait()
    assert 0.55 <= used["busy"] <= 1.5
    assert used["idle"] < 0.05
