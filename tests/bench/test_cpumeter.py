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
# Waits for the go file, starts a child that burns 0.4 s of CPU, burns 0.2 s itself, waits for
# the child (reaping it), then sleeps: 0.6 s of the tree's CPU after `go`, and the root lives on.
TREE = f"""import os, subprocess, sys, time
while not os.path.exists(sys.argv[1]): time.sleep(0.01)
child = subprocess.Popen([sys.executable, '-c', {BURN.format(s=0.4)!r}])
{BURN.format(s=0.2)}child.wait()
open(sys.argv[1] + '.done', 'w').close()
time.sleep(30)
"""


def test_the_cpu_a_tree_spends_is_counted_to_its_root(tmp_path: Path) -> None:
    go = tmp_path / "go"
    busy = subprocess.Popen([sys.executable, "-c", TREE, str(go)])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)  # both interpreters started before the first sample
        roots = {"busy": busy.pid, "idle": idle.pid}
        before = cpumeter.sample(roots)
        go.touch()
        time.sleep(0.3)  # the child is burning: a live descendant counts to its root
        assert cpumeter.spent(before, cpumeter.sample(roots))["busy"] > 0.15
        deadline = time.monotonic() + 30
        while not (tmp_path / "go.done").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        used = cpumeter.spent(before, cpumeter.sample(roots))
    finally:
        idle.kill()
        busy.kill()
    assert 0.55 <= used["busy"] <= 1.0  # the child, reaped, is in its parent's times
    assert used["idle"] < 0.05
