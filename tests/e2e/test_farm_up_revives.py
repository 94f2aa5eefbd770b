"""`farm up` on a local farm that lost some of its processes brings back just those, as they ran
(same ports, ACL users, role configs and CPUs), and leaves the others running: an operator whose
Redis was killed, its data wiped, and a worker with it, runs `farm up` and renders again."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis
import requests

from farm.adapters import proc
from farm.adapters.settings import load_settings
from farm.control.processes import Farm
from farm.dispatch import ping_worker
from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import SMALL, frame_count, submit, wait_final, wait_for

pytestmark = pytest.mark.e2e

HOST = socket.gethostname()


def _pids(farm: LocalFarm) -> dict[str, int]:
    pids: dict[str, int] = json.loads((farm.data / "farm-up.json").read_text())["pids"]
    return pids


def _all_ours(farm: LocalFarm) -> bool:
    state = Farm.load(farm.data)
    return bool(state.pids) and all(state.ours(name) for name in state.pids)


def _kill(farm: LocalFarm, *names: str) -> None:
    """SIGKILL each named process group, as a crash or the OOM killer would, until it is gone."""
    for name in names:
        os.killpg(_pids(farm)[name], signal.SIGKILL)
    state = Farm.load(farm.data)
    wait_for(f"{', '.join(names)} to die", lambda: not any(state.ours(n) for n in names), 30)


def _brought_back(up: subprocess.CompletedProcess[str]) -> list[str]:
    found = re.search(r"^brought back: (.+)$", up.stdout, re.M)
    assert found, f"{up.returncode}\n{up.stdout}\n{up.stderr}"
    return found.group(1).split(", ")


def _cpus_allowed(pid: int) -> str:
    found = re.search(
        r"^Cpus_allowed_list:\s*(\S+)$", Path(f"/proc/{pid}/status").read_text(), re.M
    )
    assert found
    return found.group(1)


class _Hooks(ThreadingHTTPServer):
    """A webhook receiver on loopback: the reconciler's notifier posts each job's end here."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, object]] = []
        self.arrived = threading.Event()
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hooks.bodies.append(
                    json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                )
                self.send_response(204)
                self.end_headers()
                hooks.arrived.set()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/farm-events"
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_farm_up_brings_back_a_killed_redis_and_worker_and_leaves_the_rest_running(
    tmp_path: Path,
) -> None:
    # GIVEN a farm that rendered a job, then lost Redis (and its data) and its second worker
    farm = start_farm(tmp_path, workers=2)
    hooks = _Hooks()
    try:
        first = submit(farm, DEMO, "--frames", "1-4", "--chunk-size", "2", "--samples", "2")
        assert wait_final(farm, first, 300)["state"] == "done"
        before = _pids(farm)
        worker2_cpus = _cpus_allowed(before["worker2"])
        _kill(farm, "redis", "worker2")
        shutil.rmtree(farm.data / "redis")

        # WHEN the operator runs `farm up`
        up = farm.farm("up", "--data", str(farm.data), timeout=300)

        # THEN it names exactly what it brought back, and the rest kept their processes
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{farm.logs()}"
        assert _brought_back(up) == ["redis", "worker2"]
        assert "no data to load" in up.stdout and "Traceback" not in up.stderr
        after = _pids(farm)
        kept = ["s3", "worker1", "reconciler", "flower", "web"]
        assert {n: after[n] for n in kept} == {n: before[n] for n in kept}
        assert after["redis"] != before["redis"] and after["worker2"] != before["worker2"]
        assert _all_ours(farm)
        assert _cpus_allowed(after["worker2"]) == worker2_cpus

        # AND Redis is on its port with its ACL users, and started empty (its data was wiped)
        admin = redis.Redis.from_url(farm.admin().redis_url, decode_responses=True)
        assert set(admin.acl_users()) == {"default", "admin", "control", "worker", "cli"}
        assert farm.ledger().job(first) == {}
        worker_settings = load_settings(env={}, config_path=farm.data / "roles/worker.json")
        as_worker = redis.Redis.from_url(worker_settings.redis_url)
        assert as_worker.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_worker.flushall()

        # AND the worker that kept running found the new Redis by itself
        ledger = farm.ledger()
        wait_for(
            "worker1's heartbeat, from its same process",
            lambda: ledger.workers().get(f"worker1@{HOST}", {}).get("pid") == before["worker1"],
            120,
            farm,
        )
        cli = load_settings(env={}, config_path=farm.config)
        wait_for(
            "worker1 to answer a ping through the broker",
            lambda: ping_worker(cli, f"worker1@{HOST}", timeout_s=5),
            120,
            farm,
        )

        # AND a new job renders to the end, its end announced by the reconciler that kept running
        out = farm.farm(
            "submit", str(DEMO), *SMALL, "--frames", "1-4", "--chunk-size", "2", "--samples", "2",
            "--notify", hooks.url, "--wait", "--json", timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{farm.logs()}"
        second = json.loads(out.stdout)
        assert second["state"] == "done", farm.logs()
        assert frame_count(farm, second["id"], tmp_path) == 4
        assert hooks.arrived.wait(120), farm.logs()
        done = [b["job"] for b in hooks.bodies if b["event"] == "job.done"]
        assert [job["id"] for job in done] == [second["id"]]  # type: ignore[index]
    finally:
        hooks.shutdown()
        farm.down()


@pytest.fixture(scope="module")
def small_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    """A one-worker farm; each test leaves it whole."""
    farm = start_farm(tmp_path_factory.mktemp("revive"), workers=1)
    try:
        yield farm
    finally:
        farm.down()


def test_farm_up_on_a_whole_farm_says_it_is_up_and_starts_nothing(small_farm: LocalFarm) -> None:
    before = _pids(small_farm)
    up = small_farm.farm("up", "--data", str(small_farm.data), check=True)
    assert up.stdout.startswith("farm is already up without TLS")
    assert "brought back" not in up.stdout
    assert _pids(small_farm) == before and _all_ours(small_farm)


def test_farm_up_asking_for_other_workers_says_how_to_get_them(small_farm: LocalFarm) -> None:
    before = _pids(small_farm)
    up = small_farm.farm("up", "--data", str(small_farm.data), "--workers", "2", check=True)
    assert "it runs 1 worker; to run 2: `farm down`, then `farm up --workers 2`" in up.stdout
    assert _pids(small_farm) == before


def test_a_pid_now_another_process_s_counts_as_dead_and_that_process_is_left_alone(
    small_farm: LocalFarm,
) -> None:
    """GIVEN worker1 died and its pid in farm-up.json now names a bystander (another start time),
    WHEN `farm up` runs, THEN worker1 comes back and the bystander is not signalled."""
    _kill(small_farm, "worker1")
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        state_file = small_farm.data / "farm-up.json"
        state = json.loads(state_file.read_text())
        started = proc.start_time(bystander.pid)
        assert started is not None
        state["pids"]["worker1"], state["starts"]["worker1"] = bystander.pid, started - 100
        state_file.write_text(json.dumps(state))
        up = small_farm.farm("up", "--data", str(small_farm.data), timeout=300)
        assert _brought_back(up) == ["worker1"]
        assert bystander.poll() is None, "farm up signalled a process it did not start"
        assert _pids(small_farm)["worker1"] != bystander.pid and _all_ours(small_farm)
    finally:
        bystander.kill()
        bystander.wait()


def test_a_dead_servers_port_taken_by_another_program_is_refused_and_nothing_else_moves(
    small_farm: LocalFarm,
) -> None:
    """GIVEN Flower died and another program listens on its port, WHEN `farm up` runs, THEN it
    says what to do and exits 1, the rest untouched; once the port is free, Flower comes back."""
    port = small_farm.settings()["flower_url"].rsplit(":", 1)[1]
    _kill(small_farm, "flower")
    before = _pids(small_farm)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", int(port)))
    squatter.listen()
    with squatter:
        up = small_farm.farm("up", "--data", str(small_farm.data), timeout=300)
    assert up.returncode == 1 and "Traceback" not in up.stderr
    assert f"port {port}" in up.stderr and "taken by another program" in up.stderr
    assert _pids(small_farm) == before
    again = small_farm.farm("up", "--data", str(small_farm.data), timeout=300)
    assert _brought_back(again) == ["flower"] and _all_ours(small_farm)


def test_a_farm_with_nothing_running_starts_whole(small_farm: LocalFarm) -> None:
    small_farm.farm("down", "--data", str(small_farm.data), check=True, timeout=120)
    up = small_farm.farm("up", "--data", str(small_farm.data), "--workers", "1", check=True)
    assert up.stdout.startswith("farm is up; data in") and "brought back" not in up.stdout
    assert sorted(_pids(small_farm)) == sorted(
        ["redis", "s3", "worker1", "reconciler", "flower", "web"]
    )
    assert _all_ours(small_farm)


def test_a_tls_farm_gets_its_servers_back_over_tls(tmp_path: Path) -> None:
    """GIVEN a `farm up --tls` farm that lost Redis, the store and the job pages, WHEN `farm up`
    runs (without --tls), THEN they come back on TLS with the farm's CA, as the rest expects."""
    farm = start_farm(tmp_path, 1, None, "--tls")
    try:
        _kill(farm, "redis", "s3", "web")
        up = farm.farm("up", "--data", str(farm.data), timeout=300)
        assert _brought_back(up) == ["redis", "s3", "web"], farm.logs()
        assert "kept running with TLS" in up.stdout and "without TLS: `farm down`" in up.stdout
        assert "no data to load" not in up.stdout  # its data was kept: Redis loaded it
        assert _all_ours(farm)
        farm.ledger().ping()
        farm.store().put_bytes("probe/tls.txt", b"ok")
        assert farm.store().get_bytes("probe/tls.txt") == b"ok"
        s = farm.settings()
        assert s["web_url"].startswith("https://")
        answer = requests.get(
            f"{s['web_url']}/", auth=(s["flower_user"], s["flower_password"]),
            verify=str(farm.data / "tls" / "ca.crt"), timeout=30,
        )  # fmt: skip
        assert answer.status_code == 200
    finally:
        farm.down()
