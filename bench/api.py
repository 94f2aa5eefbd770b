"""`python -m bench api`: the front door's cost. `farm submit` of one scene and its files through the
API (a client config from `farm login`: presigned PUTs, the server hashing each staged upload)
against the same command in direct mode (the farm's own config: the CLI's store keys), in turns in
the same run, cold (every file new to the store) and warm (all of it stored); and the API's
requests per second for one job's status (GET /api/v1/jobs/{id}) from a few client threads,
beside GET /api/v1/version (no token, no ledger) on the same server.

The scene is bench.uploads' (scenes/textured.blend reading an image sequence of incompressible
files); the farm has no workers, so nothing renders while submits are timed, and each job is
cancelled once queued.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import LocalFarm, Row, start_farm
from bench.uploads import _timed, make_scene
from farm.adapters.farmapi import FarmAPI

CLIENT_THREADS = 4


def run(quick: bool, work: Path | None = None) -> tuple[dict[str, Any], list[Row]]:
    total_mb, files, rounds, seconds = (8, 4, 1, 3.0) if quick else (256, 16, 3, 10.0)
    base = Path(tempfile.mkdtemp(prefix="farm-bench-api-", dir=work))
    farm = start_farm(workers=0, base=base / "farm")
    try:
        token = _user(farm)
        url = json.loads(farm.config.read_text())["web_url"]
        client = _client_env(base / "home")
        farm_login = [sys.executable, "-m", "farm", "login", url, "--token-stdin"]
        _run_with_stdin(farm_login, client, token, cwd=base / "home")
        scene = make_scene(base, total_mb, files)
        submits = _submits(farm, client, scene, total_mb, files, rounds)
        job_id = submits.pop("last_job")
        reads = _status_rate(FarmAPI(url, token), job_id, CLIENT_THREADS, seconds)
    finally:
        farm.close()
    results = {"mb": total_mb, "files": files, "rounds": rounds, "submit": submits,
               "requests": reads}  # fmt: skip
    rows = [
        Row(
            bench="api",
            case=f"submit, {case} ({total_mb} MiB in {files} files "
            f"{'new' if case == 'cold' else 'stored'})",
            farm=f"{submits[case]['api_s_median']:.2f} s through the API",
            baseline=f"{submits[case]['direct_s_median']:.2f} s direct",
            ratio=submits[case]["ratio_median"],
            note=f"median of {rounds} turn(s); ratio: API / direct",
        )
        for case in ("cold", "warm")
    ]
    job, version = reads["job"], reads["version"]
    rows.append(
        Row(
            bench="api",
            case=f"GET /api/v1/jobs/{{id}}, {CLIENT_THREADS} client threads, {seconds:.0f} s",
            farm=f"{job['per_s']:.0f} req/s (p50 {job['p50_ms']:.1f} ms, p95 "
            f"{job['p95_ms']:.1f} ms)",
            baseline=f"{version['per_s']:.0f} req/s GET /api/v1/version",
            ratio=version["per_s"] / job["per_s"] if job["per_s"] else None,
            note="ratio: version / job status (a new connection per request, as urllib makes)",
        )
    )
    return results, rows


def _user(farm: LocalFarm) -> str:
    from farm.control.users import Users
    from farm.core.access import UserRole

    _, token = Users(farm.store()).add(f"bench-{os.getpid()}", UserRole.WRANGLER)
    return token


def _client_env(home: Path) -> dict[str, str]:
    """An artist's machine: a HOME of its own and no FARM_* variable (no farm config at all)."""
    home.mkdir(parents=True)
    kept = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    return {**kept, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def _run_with_stdin(argv: list[str], env: dict[str, str], text: str, cwd: Path) -> None:
    done = subprocess.run(argv, env=env, input=text, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} -> {done.returncode}: {done.stderr}")


def _submits(
    farm: LocalFarm, client: dict[str, str], scene: Path, total_mb: int, files: int, rounds: int
) -> dict[str, Any]:
    """Each round: cold direct and API (fresh textures before each: the scene and its library
    are stored once before the first), then warm direct and API; the order flips every round,
    so a drift of the machine's speed falls on both alike."""
    argv = [sys.executable, "-m", "farm", "submit", str(scene), "--chunk-size", "5", "--json"]
    found: dict[str, Any] = {case: {"direct_s": [], "api_s": []} for case in ("cold", "warm")}
    _, out = _timed(argv, farm.env)  # untimed: the scene and its library stored, as for a 2nd shot
    farm.farm("cancel", json.loads(out)["id"])
    last = ""
    for turn in range(rounds):
        modes = [("direct", farm.env), ("api", client)]
        if turn % 2:
            modes.reverse()
        for case in ("cold", "warm"):
            for mode, env in modes:
                if case == "cold":
                    for path in sorted((scene.parent / "tex").glob("big_*.png")):
                        path.write_bytes(os.urandom(total_mb * 1024 * 1024 // files))
                took, out = _timed(argv, env)
                reply = json.loads(out)
                farm.farm("cancel", reply["id"])
                found[case][f"{mode}_s"].append(round(took, 3))
                found[case].setdefault(f"{mode}_uploaded", []).append(reply["assets"]["uploaded"])
                last = reply["id"]
    for case in found.values():
        case["direct_s_median"] = statistics.median(case["direct_s"])
        case["api_s_median"] = statistics.median(case["api_s"])
        case["ratio_median"] = round(
            statistics.median(a / d for a, d in zip(case["api_s"], case["direct_s"], strict=True)),
            3,
        )
    return {**found, "last_job": last}


def _status_rate(api: FarmAPI, job_id: str, threads: int, seconds: float) -> dict[str, Any]:
    """GET /version, then the job's status, each from `threads` clients for `seconds`."""
    out = {}
    for name, call in (("version", api.server_version), ("job", lambda: api.job(job_id))):
        call()  # warm: the first read of a job loads the users and the ledger's scripts
        out[name] = _rate(call, threads, seconds)
    return out


def _rate(call: Callable[[], object], threads: int, seconds: float) -> dict[str, Any]:
    """Requests a second and latencies from `threads` clients calling as fast as answers come."""
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def loop() -> None:
        mine = []
        while time.monotonic() < deadline:
            started = time.perf_counter()
            call()
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    started = time.monotonic()
    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    took = time.monotonic() - started
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "per_s": round(len(ordered) / took, 1),
        "p50_ms": round(1000 * ordered[len(ordered) // 2], 2),
        "p95_ms": round(1000 * ordered[int(len(ordered) * 0.95)], 2),
        "threads": threads,
        "seconds": round(took, 2),
    }
