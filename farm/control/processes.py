"""A local farm's processes: their pids, start times and ports as `farm up` recorded them
(DATA/farm-up.json), whether each is still the one it started, and waiting for a server to
answer. Shared by the process farm (farm.control.local) and the container farm
(farm.control.containers)."""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.adapters import proc
from farm.control.credentials import HOST
from farm.core.errors import FarmError, UnreachableError


@dataclass(slots=True, kw_only=True)
class Farm:
    data: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    starts: dict[str, int | None] = field(default_factory=dict)
    """Each pid's process start time: a pid reused by another process is never signalled."""
    threads: int = 0
    """Each worker's `--threads`."""
    cpus: dict[str, str] | None = None
    """Each worker's `--cpus` ('': not pinned), so one brought back runs as it ran; None in the
    state of a farm started before they were kept."""

    @property
    def state_file(self) -> Path:
        return self.data / "farm-up.json"

    def save(self) -> None:
        self.starts = {n: self.starts.get(n) or proc.start_time(p) for n, p in self.pids.items()}
        state = {"ports": self.ports, "pids": self.pids, "starts": self.starts,
                 "threads": self.threads, "cpus": self.cpus}  # fmt: skip
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, data: Path) -> Farm:
        farm = cls(data=data)
        if farm.state_file.exists():
            raw = json.loads(farm.state_file.read_text())
            farm.ports, farm.pids = raw.get("ports", {}), raw.get("pids", {})
            farm.starts = raw.get("starts", {})
            farm.threads, farm.cpus = raw.get("threads", 0), raw.get("cpus")
        return farm

    def ours(self, name: str) -> bool:
        """The process named `name` is alive (not merely unreaped) and is the one `farm up`
        started."""
        pid = self.pids[name]
        return proc.is_process(pid, self.starts.get(name)) and not _exited(pid)

    def running(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if self.ours(name)}


def _exited(pid: int) -> bool:
    """`pid` has exited, every thread of it, and its parent has not reaped it yet (kill(pid, 0)
    still finds it). A leader shows Z while its other threads still hold its files and ports."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX":
                return False
        except OSError:  # that thread is gone
            continue
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int, *, reuse: bool = False) -> bool:
    """`reuse`: SO_REUSEADDR, as servers bind, so a dead server's lingering connections (TIME_WAIT)
    do not count."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def wait_for(what: str, check: Any, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            check()
            return
        except (FarmError, OSError) as exc:
            last = exc
            time.sleep(0.3)
    raise UnreachableError(
        f"{what} did not come up within {timeout_s:.0f} s ({last}); see {log_path}"
    )


def http_answers(url: str, ca_file: str) -> None:
    """Any HTTP answer will do (Flower says 401 without credentials): the server is up."""
    context = (
        ssl.create_default_context(cafile=ca_file or None) if url.startswith("https") else None
    )
    try:
        urllib.request.urlopen(url + "/healthcheck", timeout=2, context=context).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        raise UnreachableError(str(exc)) from exc


def enough(have: int, want: int) -> None:
    if have < want:
        raise UnreachableError(f"{have} of {want} registered")
