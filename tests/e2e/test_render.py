"""A user's render job on a real local farm: submit through the CLI, wait, fetch, check with ffprobe."""

from __future__ import annotations

import json
import time
from fractions import Fraction
from pathlib import Path

import pytest

from farm.core import keys
from tests.conftest import DEMO, LocalFarm, ffprobe

pytestmark = pytest.mark.e2e

SMALL = ["--resolution", "320x180", "--samples", "4", "--fps", "24"]


def _video(farm: LocalFarm, job_id: str, dest: Path) -> dict[str, object]:
    fetched = farm.farm("fetch", job_id, str(dest), check=True)
    path = Path(fetched.stdout.strip().splitlines()[0])
    assert path.exists()
    stream = ffprobe(path)["streams"][0]
    return stream


def _objects(farm: LocalFarm, job_id: str, kind: str) -> list[str]:
    keys: list[str] = farm.store().keys(f"jobs/{job_id}/{kind}/")
    return keys


def test_demo_scene_renders_into_a_video_with_every_frame(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    result = local_farm.farm(
        "submit", str(DEMO), "--frames", "1-48", "--chunk-size", "8", *SMALL, "--wait", "--json"
    )
    assert result.returncode == 0, result.stderr + local_farm.logs()
    summary = json.loads(result.stdout)
    job_id = summary["id"]
    assert summary["state"] == "done"
    assert summary["chunks_done"] == summary["chunks_total"] and summary["frames_total"] == 48
    assert local_farm.planned_chunks(job_id) == 6
    # Each worker renders and encodes: the segment links the frames it rendered (checked links,
    # never followed), it downloads none.
    chunks = local_farm.ledger().chunks(job_id)
    assert [int(c["frames_fetched_bytes"]) for c in chunks] == [0] * len(chunks)
    # The ledger is each chunk's record: Celery keeps no result of its own in Redis for them.
    assert list(local_farm.ledger().r.scan_iter("celery-task-meta-*")) == []

    stream = _video(local_farm, job_id, tmp_path)
    assert int(stream["nb_read_frames"]) == 48  # type: ignore[call-overload]
    # A folder named with a trailing / is made and gets JOB.mp4; a DEST that cannot be written
    # is one line saying what is in the way, not a traceback.
    into = local_farm.farm("fetch", job_id, f"{tmp_path}/new/", check=True)
    assert into.stdout.strip() == f"{tmp_path}/new/{job_id}.mp4"
    (tmp_path / "notes.txt").write_text("a file")
    blocked = local_farm.farm("fetch", job_id, str(tmp_path / "notes.txt" / "out.mp4"))
    assert blocked.returncode == 1 and "Traceback" not in blocked.stderr
    assert f"{tmp_path / 'notes.txt'} is in the way; choose another DEST" in blocked.stderr
    assert (stream["width"], stream["height"]) == (320, 180)
    assert Fraction(str(stream["r_frame_rate"])) == 24
    assert stream["codec_name"] == "h264"
    # BT.709, and said so through the join: players show the frames' colours.
    colour = ("color_space", "color_primaries", "color_transfer", "color_range")
    assert [stream.get(k) for k in colour] == ["bt709", "bt709", "bt709", "tv"]

    # One frame each in the store, the one its record names (keys.frame_key: its writer's).
    records = local_farm.ledger().frame_records(job_id)
    assert sorted(records) == list(range(1, 49))
    frames = _objects(local_farm, job_id, "frames")
    assert sorted(frames) == sorted(
        keys.frame_key(job_id, frame, record.writer) for frame, record in records.items()
    )
    # A chunk per segment and manifest: the 6 planned, and any an idle worker split off the last
    # ones running (farm.core.split), which the video above holds frame-exact all the same.
    assert len(_objects(local_farm, job_id, "segments")) == len(chunks) >= 6
    manifests = _objects(local_farm, job_id, "manifests")
    assert len(manifests) == len(chunks)
    manifest = local_farm.store().get_json(manifests[0])
    assert manifest["frame_count"] == 8
    assert [f["frame"] for f in manifest["frames"]] == list(range(1, 9))
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in manifest["frames"])

    # Frames and segments carry the tag the bucket's lifecycle rule expires; the video does not.
    s3, bucket = local_farm.store().s3, local_farm.store().bucket
    tags = {
        k: s3.get_object_tagging(Bucket=bucket, Key=k)["TagSet"]
        for k in (frames[0], manifest["segment"]["key"], f"jobs/{job_id}/output.mp4")
    }
    assert (
        tags[frames[0]]
        == tags[manifest["segment"]["key"]]
        == [{"Key": "farm-data", "Value": "intermediate"}]
    )
    assert tags[f"jobs/{job_id}/output.mp4"] == []


def test_status_shows_each_chunk_and_the_output(local_farm: LocalFarm) -> None:
    job_id = local_farm.farm(
        "submit",
        str(DEMO),
        "--frames",
        "1-4",
        "--chunk-size",
        "2",
        *SMALL,
        "--wait",
        "--json",
        check=True,
    ).stdout
    job_id = json.loads(job_id)["id"]
    status = json.loads(local_farm.farm("status", job_id, "--json", check=True).stdout)
    assert status["state"] == "done"
    assert status["output"] == f"jobs/{job_id}/output.mp4"
    assert [c["state"] for c in status["chunks"]] == ["done", "done"]
    assert all(c["worker"] and c["duration_s"] for c in status["chunks"])
    text = local_farm.farm("status", job_id, check=True).stdout
    assert "done" in text and "output" in text
    assert [c["attempt"] for c in status["chunks"]] == [1, 1]  # a clean run is one try
    assert " try " in text
    rows = [line.split() for line in local_farm.farm("jobs", check=True).stdout.splitlines()]
    assert rows[0][:3] == ["job", "kind", "state"]
    assert rows[2][:3] == [job_id, "render", "done"]  # newest first, under the header rule


def test_frame_step_and_uneven_last_chunk(local_farm: LocalFarm, tmp_path: Path) -> None:
    result = local_farm.farm(
        "submit", str(DEMO), "--frames", "1-23:2", "--chunk-size", "5", *SMALL, "--wait", "--json"
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (local_farm.planned_chunks(summary["id"]), summary["frames_total"]) == (3, 12)
    stream = _video(local_farm, summary["id"], tmp_path)
    assert int(stream["nb_read_frames"]) == 12  # type: ignore[call-overload]
    # Segments of 5, 5 and 2 frames join by mp4join, not the concat demuxer it falls back to.
    assert local_farm.ledger().job(summary["id"])["stitch_join"] == "mp4join"
    frames = _objects(local_farm, summary["id"], "frames")
    assert [int(Path(k).name[:6]) for k in frames] == list(range(1, 24, 2))


def test_two_jobs_at_once_both_finish_exactly(local_farm: LocalFarm, tmp_path: Path) -> None:
    ids = []
    for frames in ("1-12", "30-45"):
        out = local_farm.farm(
            "submit", str(DEMO), "--frames", frames, "--chunk-size", "4", *SMALL, "--codec", "hevc", "--json",
            check=True,
        )  # fmt: skip
        ids.append(json.loads(out.stdout)["id"])
    deadline = time.monotonic() + 300
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {
            j: json.loads(local_farm.farm("status", j, "--json").stdout)["state"] for j in ids
        }
        if all(s in ("done", "failed") for s in states.values()):
            break
        time.sleep(1)
    assert set(states.values()) == {"done"}, states
    for job_id, expected in zip(ids, (12, 16), strict=True):
        stream = _video(local_farm, job_id, tmp_path)
        assert int(stream["nb_read_frames"]) == expected  # type: ignore[call-overload]
        assert stream["codec_name"] == "hevc"
