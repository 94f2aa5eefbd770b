"""An encode job whose segment boundaries move onto the master's scene cuts, end to end on the
local farm: the segments start on the cuts, and the output keeps every frame in its place."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LocalFarm
from tests.e2e.encode_media import FFMPEG, psnr_per_frame, streams
from tests.e2e.test_api_client import Client, _user

pytestmark = pytest.mark.e2e

SIZE = (320, 180)
CUTS = (37, 101)
FRAMES = 150


def _master_with_cuts(path: Path) -> Path:
    """150 frames at 24 fps, hard cuts at frames 37 and 101 (moving test pattern, colour bars,
    a plain colour), long open GOPs with B-frames, and a tone."""
    parts = [("testsrc2", CUTS[0]), ("smptebars", CUTS[1] - CUTS[0]), ("color=c=0x3050a0", 49)]
    argv = [*FFMPEG]
    for source, _ in parts:
        joined = ":" if "=" in source else "="
        argv += ["-f", "lavfi", "-i", f"{source}{joined}s={SIZE[0]}x{SIZE[1]}:r=24"]
    argv += ["-f", "lavfi", "-i", f"sine=f=440:r=48000:d={FRAMES / 24}"]
    trims = "".join(
        f"[{i}:v]trim=end_frame={n},setpts=PTS-STARTPTS[v{i}];" for i, (_, n) in enumerate(parts)
    )
    graph = trims + "".join(f"[v{i}]" for i in range(len(parts))) + "concat=n=3:v=1[v]"
    argv += ["-filter_complex", graph, "-map", "[v]", "-map", "3:a"]
    argv += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
    argv += ["-x264-params", "open-gop=1:keyint=30:scenecut=0:bframes=3:b-adapt=0"]
    argv += ["-c:a", "aac", "-shortest", str(path)]
    subprocess.run(argv, check=True)
    return path


def _keyframes(path: Path) -> list[int]:
    shown = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=key_frame",
         "-of", "csv=p=0", str(path)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    flags = [line.strip().rstrip(",") for line in shown.stdout.splitlines() if line.strip()]
    return [n for n, flag in enumerate(flags) if flag == "1"]


def test_segments_start_on_the_scene_cuts_and_the_output_keeps_every_frame(
    local_farm: LocalFarm, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN a 150-frame master with hard cuts at frames 37 and 101
    master = _master_with_cuts(tmp_path / "cuts.mov")
    # WHEN it is transcoded in segments of 48 frames
    result = local_farm.farm(
        "submit", str(master), "--segment-frames", "48", "--resolution", f"{SIZE[0]}x{SIZE[1]}",
        "--preset", "ultrafast", "--wait", "--json",
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stderr}\n{local_farm.logs()}"
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    job_id = summary["id"]
    # THEN its segments start on the cuts, as recorded in the job's spec and manifests
    stored = local_farm.store().get_json(f"jobs/{job_id}/spec.json")
    assert [c[0] for c in stored["chunks"]] == [0, *CUTS]
    assert tuple(stored["spec"]["master"]["scene_cuts"]) == CUTS
    store = local_farm.store()
    manifests = [store.get_json(k) for k in store.keys(f"jobs/{job_id}/manifests/")]
    spans = {m["chunk"]: (m["frames"]["first"], m["frames"]["end"]) for m in manifests}
    assert spans == {0: (0, 37), 1: (37, 101), 2: (101, 150)}, spans
    assert [m["frame_count"] for m in sorted(manifests, key=lambda m: m["chunk"])] == [37, 64, 49]
    # ... `farm status` says so
    shown = local_farm.farm("status", job_id, check=True).stdout
    assert "2 of 2 boundaries moved to scene cuts" in shown, shown
    # ... and the output has every frame of the master, each in its place, an IDR on each cut
    out = tmp_path / "cuts.mp4"
    local_farm.farm("fetch", job_id, str(out), check=True)
    video = next(s for s in streams(out)["streams"] if s["codec_type"] == "video")
    assert int(video["nb_read_packets"]) == FRAMES
    psnr = psnr_per_frame(out, master, SIZE, tmp_path)
    assert len(psnr) == FRAMES
    assert min(psnr) >= 30, f"frame {psnr.index(min(psnr))} is {min(psnr)} dB"
    keyframes = _keyframes(out)
    assert {0, *CUTS} <= set(keyframes), keyframes

    # WHEN an artist's machine submits the same master through the API
    client = Client(tmp_path_factory.mktemp("artist"))
    token = _user(local_farm, "cuts-artist", "artist")
    client.ok("login", local_farm.settings()["web_url"], "--token-stdin", stdin=token + "\n")
    done = client.farm("submit", str(master), "--segment-frames", "48", "--resolution",
                       f"{SIZE[0]}x{SIZE[1]}", "--preset", "ultrafast", "--wait", "--json")  # fmt: skip
    # THEN the same three segments are planned, and its status says so
    assert done.returncode == 0, done.stdout + done.stderr + local_farm.logs()
    remote = json.loads(done.stdout)
    assert (remote["state"], remote["chunks_total"]) == ("done", 3)
    shown = client.ok("status", remote["id"]).stdout
    assert "2 of 2 boundaries moved to scene cuts" in shown, shown
