"""docker-compose.yml's farm as containers (`farm up --containers`), tried as its users would:
a render job and a transcode job end to end; the worker container as designed (non-root, a
read-only root, no capabilities, the box working inside it, a healthcheck); every published and
internal port refusing an anonymous request; and spot life: a stop, a kill and a join during one
job, with every frame in the video exactly once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from farm.core import keys
from tests.conftest import DEMO, ffprobe
from tests.containers.conftest import ContainerFarm, podman
from tests.e2e.encode_media import make_master, streams
from tests.e2e.farmtools import status, submit, wait_final, wait_for

pytestmark = pytest.mark.e2e


def _done(farm: ContainerFarm, result: Any) -> dict[str, Any]:
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{farm.logs()}"
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", f"{summary['error']}\n{farm.logs()}"
    return summary


def test_a_render_job_runs_in_the_worker_containers(
    container_farm: ContainerFarm, tmp_path: Path
) -> None:
    farm = container_farm
    result = farm.farm(
        "submit", str(DEMO), "--frames", "1-12", "--chunk-size", "3", "--resolution", "320x180",
        "--samples", "4", "--wait", "--json",
    )  # fmt: skip
    summary = _done(farm, result)
    out = tmp_path / "render.mp4"
    farm.farm("fetch", summary["id"], str(out), check=True)
    video = ffprobe(out)["streams"][0]
    assert (int(video["nb_read_frames"]), video["width"], video["height"]) == (12, 320, 180)
    containers = {farm.worker_name(c) for c in farm.containers("worker")}
    assert {c["worker"] for c in summary["chunks"]} <= containers, "rendered outside a container"


def test_a_transcode_job_runs_in_the_worker_containers(
    container_farm: ContainerFarm, tmp_path: Path
) -> None:
    farm = container_farm
    master = make_master(tmp_path / "master.mov", size="640x360", rate="24", seconds=4)
    # --score vmaf: the image's own ffmpeg with libvmaf (imageio-ffmpeg's), run in the box
    result = farm.farm("submit", str(master), "--codec", "hevc", "--preset", "ultrafast",
                       "--score", "vmaf", "--wait", "--json")  # fmt: skip
    summary = _done(farm, result)
    scores = [chunk["vmaf"] for chunk in summary["chunks"]]
    assert scores and all(isinstance(v, float) and 20 < v <= 100 for v in scores), scores
    out = tmp_path / "out.mp4"
    farm.farm("fetch", summary["id"], str(out), check=True)
    got = streams(out)["streams"]
    video = next(s for s in got if s["codec_type"] == "video")
    assert (video["codec_name"], int(video["nb_read_packets"])) == ("hevc", 96)
    assert [s["codec_name"] for s in got if s["codec_type"] == "audio"] == ["aac"]


def test_the_worker_container_is_non_root_read_only_and_without_capabilities(
    container_farm: ContainerFarm,
) -> None:
    """Read from `podman inspect`, then tried from inside: the root cannot be written, the
    process holds no capability, and the box (bubblewrap) still makes its own namespaces."""
    farm = container_farm
    name = farm.container("worker")
    info = farm.inspect(name)
    config, host = info["Config"], info["HostConfig"]
    assert isinstance(config, dict) and isinstance(host, dict)
    assert config["User"] == "10001:10001"
    assert host["ReadonlyRootfs"] is True
    assert info["EffectiveCaps"] in ([], None)
    assert host["PidsLimit"] == 4096
    assert config["StopSignal"] in ("SIGTERM", 15)
    assert int(config["StopTimeout"]) >= 150
    assert info["Path"] == "tini"  # PID 1 passes SIGTERM on to the worker
    health = podman("image", "inspect", "--format", "{{json .HealthCheck}}", "farm-worker:dev")
    assert json.loads(health.stdout)["Test"] == ["CMD", "farm", "worker", "--ping"]
    inside = podman("exec", name, "sh", "-c", "id -u; grep CapEff /proc/self/status; "
                    "touch /opt/x 2>&1; touch /tmp/ok && echo tmp-writable").stdout  # fmt: skip
    assert inside.splitlines()[0] == "10001"
    assert "0000000000000000" in inside
    assert "Read-only file system" in inside and "tmp-writable" in inside
    box = podman(
        "exec", name, "bwrap", "--unshare-all", "--cap-drop", "ALL", "--dev", "/dev",
        "--proc", "/proc", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--",
        "sh", "-c", "echo pid $$; id -u; grep CapEff /proc/self/status",
    )  # fmt: skip
    pid, uid, caps = box.stdout.splitlines()
    assert int(pid.split()[1]) <= 2  # its own PID namespace (bwrap's init is 1), its own /proc
    assert (uid, caps.split()[1]) == ("10001", "0000000000000000")  # the worker's user, no caps


def test_every_service_has_a_working_healthcheck(container_farm: ContainerFarm) -> None:
    farm = container_farm
    for service in ("redis", "s3", "reconciler", "flower", "web", "worker"):
        name = farm.container(service)
        assert farm.inspect(name)["Config"]["Healthcheck"], f"{service} has no healthcheck"  # type: ignore[index]
        wait_for(
            f"{service}'s healthcheck to pass",
            lambda n=name: podman("healthcheck", "run", n, check=False).returncode == 0,
            120,
            farm,
        )


def test_the_store_runs_as_compose_sets_it_up(container_farm: ContainerFarm) -> None:
    """The one-shot s3-security step ran and exited 0; SeaweedFS reads its security.toml from
    HOME=/weed-home (JWTs, client certificates), as a non-root user, and nothing but S3 is
    published."""
    farm = container_farm
    step = farm.inspect(farm.container("s3-security"))
    assert step["State"]["ExitCode"] == 0  # type: ignore[index]
    s3 = farm.container("s3")
    env = dict(e.split("=", 1) for e in farm.inspect(s3)["Config"]["Env"])  # type: ignore[index]
    assert env["HOME"] == "/weed-home"
    toml = podman("exec", s3, "cat", "/weed-home/.seaweedfs/security.toml").stdout
    for section in ("[jwt.signing]", "[jwt.filer_signing]", "[grpc.master]", "[https.filer]"):
        assert section in toml
    assert podman("exec", s3, "id", "-u").stdout.strip() != "0"
    ports = farm.inspect(s3)["HostConfig"]["PortBindings"]  # type: ignore[index]
    assert list(ports) == ["8333/tcp"]
    assert {b["HostIp"] for b in ports["8333/tcp"]} == {"127.0.0.1"}


def test_the_store_refuses_to_start_without_its_security(container_farm: ContainerFarm) -> None:
    """SeaweedFS's image never serves without the security.toml the s3-security step writes
    (podman-compose would start it after a failed step)."""
    alone = podman("run", "--rm", "--network", "none", "farm-seaweedfs:dev", "mini", check=False)
    assert alone.returncode == 78
    assert "refusing to serve without the store's certificates and JWTs" in alone.stderr


def test_no_secret_is_in_any_process_argv(container_farm: ContainerFarm) -> None:
    """Every user of the host can read every process's command line (`ps`): the farm's
    passwords and keys are in none, the containers' included."""
    keys = json.loads((container_farm.data / "secrets.json").read_text())
    secrets = [value for name, value in keys.items() if name != "flower_user"]
    leaks = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        leaks += [argv.replace("\0", " ")[:120] for secret in secrets if secret in argv]
    assert leaks == []


def test_a_worker_container_holds_only_the_workers_secrets(
    container_farm: ContainerFarm,
) -> None:
    """A worker container's environment names the worker's Redis user and store keys and no
    other secret of the farm (no Flower password, webhook secret, admin or other role's key);
    and its Redis user cannot flush, reconfigure or list Redis (farm.core.roles)."""
    keys = json.loads((container_farm.data / "secrets.json").read_text())
    worker = container_farm.containers("worker")[0]
    config = container_farm.inspect(worker)["Config"]
    assert isinstance(config, dict)
    env = dict(item.split("=", 1) for item in config["Env"])
    mine = {keys["redis_password_worker"], keys["s3_access_key_worker"],
            keys["s3_secret_key_worker"]}  # fmt: skip
    others = {v for n, v in keys.items() if n != "flower_user" and v not in mine}
    assert [n for n, v in env.items() if any(secret in v for secret in others)] == []
    assert env["FARM_REDIS_URL"].startswith("redis://worker:")
    assert env["FARM_S3_ACCESS_KEY"] == keys["s3_access_key_worker"]
    # WHEN the worker's own Redis user tries what only an admin may
    tries = podman(
        "exec", worker, "python3", "-c",
        "import os, redis\n"
        "r = redis.Redis.from_url(os.environ['FARM_REDIS_URL'])\n"
        "for argv in (['FLUSHALL'], ['CONFIG', 'GET', 'save'], ['KEYS', '*'], ['ACL', 'LIST'],\n"
        "             ['DEL', 'farm:jobs']):\n"
        "    try:\n"
        "        r.execute_command(*argv); print(argv[0], 'ran')\n"
        "    except redis.exceptions.NoPermissionError:\n"
        "        print(argv[0], 'refused')\n",
        check=True,
    )  # fmt: skip
    # THEN Redis refuses each
    assert tries.stdout.split() == [w for c in ("FLUSHALL", "CONFIG", "KEYS", "ACL", "DEL")
                                    for w in (c, "refused")], tries.stdout  # fmt: skip


PROBE = r"""
import json, socket, ssl, sys, urllib.error, urllib.request

def attempt(scheme, host, port, method, path, data):
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        req = urllib.request.Request(f"{scheme}://{host}:{port}{path}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=20, context=ctx) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError as exc:
        reason = exc.reason
        return type(reason).__name__ if isinstance(reason, Exception) else "URLError"
    except Exception as exc:
        return type(exc).__name__

# An object read and write (S3, the filer, a volume), a file id from the master.
TRIES = (("GET", "/farm/jobs/probe", None), ("PUT", "/farm/jobs/probe", b"evil"),
         ("GET", "/dir/assign", None))
out = {}
for host, port in json.loads(sys.argv[1]):
    key = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=20) as sock:
            sock.sendall(b"PING\r\n")
            sock.settimeout(3)  # Redis answers at once; HTTP servers wait for a whole request
            try:
                first = sock.recv(64)
            except OSError:  # an HTTP server waits for the rest of a request
                first = b""
    except OSError as exc:
        out[key] = type(exc).__name__
        continue
    if first.startswith(b"-NOAUTH"):
        out[key] = "NOAUTH"
        continue
    answers = [attempt("http", host, port, *t) for t in TRIES]
    if not any(isinstance(a, int) for a in answers):  # no plain HTTP here: TLS, then
        answers += [attempt("https", host, port, *t) for t in TRIES]
    out[key] = answers
print(json.dumps(out))
"""


LOOPBACK = ("0100007F", "00000000000000000000000001000000")
"""127.0.0.1 and ::1 as /proc/net/tcp and tcp6 write them."""


def _listening(container: str) -> list[int]:
    text = podman("exec", container, "cat", "/proc/net/tcp", "/proc/net/tcp6").stdout
    ports = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A" and ":" in fields[1]:
            address, port = fields[1].rsplit(":", 1)
            if address not in LOOPBACK:  # reachable from the network
                ports.add(int(port, 16))
    return sorted(ports)


INCONCLUSIVE = ("TimeoutError", "timeout", "SSLTimeoutError")
"""No answer in 20 s says nothing about a port: never taken for a refusal."""


def _refused(service: str, port: int, answer: object) -> bool:
    """Redis wants its password; every other port answers no anonymous object read or write,
    nor the master's file id, with a 2xx: S3 says 403 and `farm web` 401 to each, and the
    store's other ports speak TLS with its client certificate only. No answer at all is never
    taken for a refusal."""
    if service == "redis":
        return answer == "NOAUTH"
    if not isinstance(answer, list) or any(a in INCONCLUSIVE for a in answer):
        return False
    plain = answer[:3]  # over http; then, where no HTTP answered, the same over https
    if (service, port) == ("s3", 8333) and plain != [403, 403, 403]:
        return False
    if service == "web" and plain != [401, 401, 401]:
        return False
    return not any(isinstance(a, int) and 200 <= a < 300 for a in answer)


def test_every_port_refuses_an_anonymous_request(container_farm: ContainerFarm) -> None:
    """From a neighbour on the farm's network (inside the worker container) to every port each
    service listens on, SeaweedFS's HTTP and gRPC ports included, and from this host to every
    published port: no anonymous read or write gets a 2xx."""
    farm = container_farm
    targets = []
    for service in ("redis", "s3", "flower", "web"):
        targets += [(service, port) for port in _listening(farm.container(service))]
    assert ("s3", 8333) in targets and ("redis", 6379) in targets
    assert len([t for t in targets if t[0] == "s3"]) >= 6, targets  # master, volume, filer, gRPC
    probe = podman(
        "exec", farm.container("worker"), "python3", "-c", PROBE, json.dumps(targets), timeout=900
    )
    answers = json.loads(probe.stdout)
    wrong = {k: v for k, v in answers.items() if not _refused(*_split(k), v)}
    assert wrong == {}, answers
    state = json.loads((farm.data / "containers.json").read_text())
    published = [(name, int(port)) for name, port in state["ports"].items()]
    assert sorted(n for n, _ in published) == ["flower", "redis", "s3", "web"]
    local = subprocess_probe([port for _, port in published])
    inside = {"redis": ("redis", 6379), "s3": ("s3", 8333), "flower": ("flower", 5555),
              "web": ("web", 8090)}  # fmt: skip
    for name, port in published:
        assert _refused(*inside[name], local[f"127.0.0.1:{port}"]), (name, local)


def _split(key: str) -> tuple[str, int]:
    host, port = key.rsplit(":", 1)
    return host, int(port)


def subprocess_probe(ports: list[int]) -> dict[str, object]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([["127.0.0.1", p] for p in ports])],
        capture_output=True, text=True, check=True, timeout=900,
    )  # fmt: skip
    return dict(json.loads(done.stdout))


def test_farm_up_again_brings_back_a_missing_service(container_farm: ContainerFarm) -> None:
    """A service container gone (removed by hand, or its host lost it): `farm up --containers`
    run again makes it anew, and it answers; the others keep running."""
    farm = container_farm
    web = farm.container("web")
    redis_started = farm.inspect(farm.container("redis"))["State"]["StartedAt"]  # type: ignore[index]
    podman("rm", "--force", web)
    again = farm.farm("up", "--containers", "--data", str(farm.data), "--workers", "2")
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr}"
    assert "farm is up" in again.stdout
    assert farm.inspect(web)["State"]["Running"] is True  # type: ignore[index]
    assert farm.inspect(farm.container("redis"))["State"]["StartedAt"] == redis_started  # type: ignore[index]
    port = int(farm.settings()["web_url"].rsplit(":", 1)[1])
    (answer,) = subprocess_probe([port]).values()
    assert isinstance(answer, list) and answer[0] == 401  # it answers, behind its password


def _rendering(farm: ContainerFarm, job_id: str, worker: str) -> int | None:
    """The chunk `worker` holds with a frame rendered already, if any."""
    for chunk in status(farm, job_id)["chunks"]:
        rendering = chunk["state"] == "rendering" and chunk["frames_rendered"] >= 1
        if chunk["worker"] == worker and rendering:
            return int(chunk["index"])
    return None


def _wait_rendering(farm: ContainerFarm, job_id: str, worker: str) -> int:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        chunk = _rendering(farm, job_id, worker)
        if chunk is not None:
            return chunk
        time.sleep(0.2)
    raise AssertionError(f"{worker} rendered no frame of {job_id} in 240 s\n{farm.logs()}")


def test_spot_life_stop_kill_and_join_during_one_job(
    container_farm: ContainerFarm, tmp_path: Path
) -> None:
    """GIVEN a job on two worker containers
    WHEN one is stopped mid-chunk (`podman stop`: SIGTERM) THEN its chunk is handed back within
    seconds, spending no try;
    WHEN the other is killed mid-chunk (`podman kill`), leaving no worker, AND worker containers
    are added (`farm up --containers --workers 3`: three new ones, the stopped and the killed
    being gone as a reclaimed instance is) THEN they join the job, the killed worker's lease
    expires and another worker takes its chunk;
    AND the video holds every frame exactly once."""
    farm = container_farm
    first, second = farm.container("worker", 1), farm.container("worker", 2)
    job_id = submit(farm, DEMO, "--frames", "1-24", "--chunk-size", "6", "--samples", "24")
    leaving = farm.worker_name(first)
    _wait_rendering(farm, job_id, leaving)

    stopped_at = time.time()
    podman("stop", "--time", "150", first)
    stop_s = time.time() - stopped_at
    events = farm.ledger().events(job_id)
    handed = [e for e in events if e["event"] == "chunk-interrupted"]
    assert len(handed) == 1, farm.logs()  # before `podman stop` returned: the worker exits then
    chunk = int(handed[0]["chunk"])
    holders = [e["worker"] for e in events
               if e["event"] == "chunk-rendering" and e["chunk"] == chunk]  # fmt: skip
    assert holders == [leaving]
    exit_code = farm.inspect(first)["State"]["ExitCode"]  # type: ignore[index]
    assert exit_code == 0  # it left on its own, not killed at the end of the stop timeout
    print(f"\npodman stop returned in {stop_s:.1f} s; chunk {chunk} handed back "
          f"{handed[0]['t'] - stopped_at:.1f} s after the stop")  # fmt: skip
    stopped = status(farm, job_id)["chunks"][chunk]
    assert (stopped["interruptions"], stopped["failures"]) == (1, 0)

    killed = farm.worker_name(second)
    _wait_rendering(farm, job_id, killed)
    podman("kill", second)
    held = [c["index"] for c in status(farm, job_id)["chunks"]
            if c["worker"] == killed and c["state"] in ("rendering", "encoding")]  # fmt: skip
    assert held, "the killed worker held no chunk"  # its lease outlives it, in the ledger
    podman("rm", "--force", first, second)
    assert status(farm, job_id)["state"] == "running"

    joined = farm.farm("up", "--containers", "--data", str(farm.data), "--workers", "3",
                       timeout=600)  # fmt: skip
    assert joined.returncode == 0, f"{joined.stdout}\n{joined.stderr}"
    newcomers = {farm.worker_name(c) for c in farm.containers("worker")}
    assert len(newcomers) == 3 and not newcomers & {leaving, killed}
    summary = wait_final(farm, job_id, 600)
    assert summary["state"] == "done", f"{summary['error']}\n{farm.logs()}"

    events = farm.ledger().events(job_id)
    for lost in held:
        takers = [e["worker"] for e in events
                  if e["event"] == "chunk-rendering" and e["chunk"] == lost]  # fmt: skip
        assert killed in takers and takers[-1] in newcomers, takers
        assert status(farm, job_id)["chunks"][lost]["failures"] == 0
    counts = farm.ledger().render_counts(job_id)
    assert sorted(counts) == list(range(1, 25))
    _assert_every_frame_once(farm, job_id, tmp_path)


def _assert_every_frame_once(farm: ContainerFarm, job_id: str, work: Path) -> None:
    """Each of the video's 24 frames is the stored frame of its own number and no other: the
    best match of video frame i among the job's stored frames is frame i."""
    import numpy as np

    video = work / "out.mp4"
    farm.store().get_file(f"jobs/{job_id}/output.mp4", video)
    frames = _decode(video)
    assert len(frames) == 24
    stored = []
    records = farm.ledger().frame_records(job_id)  # each frame's writer: the claim that counts
    for number in range(1, 25):
        png = work / f"{number:06d}.png"
        farm.store().get_file(keys.frame_key(job_id, number, records[number].writer), png)
        stored.append(_decode(png)[0])
    for i, frame in enumerate(frames):
        errors = [float(np.abs(frame.astype(int) - s.astype(int)).mean()) for s in stored]
        assert errors.index(min(errors)) == i, (
            f"video frame {i + 1} looks like frame {errors.index(min(errors)) + 1}"
        )


def _decode(path: Path) -> Any:
    import subprocess

    import numpy as np

    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-vf", "scale=80:45,format=gray",
         "-f", "rawvideo", "-"],
        capture_output=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(-1, 45, 80)
