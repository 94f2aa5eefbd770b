"""The stitch's join with real ffmpeg: frame-exact, and the index written once, at the front;
by farm.media.mp4join where it can, by the concat demuxer where it cannot."""

from __future__ import annotations

import json
import struct
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import ffmpeg
import pytest

from farm.adapters.proc import run
from farm.adapters.settings import Settings
from farm.adapters.store import sha256_file
from farm.core import keys
from farm.core.plan import plan_chunks
from farm.core.sources import MasterInfo
from farm.ledger import Ledger
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options, concat_argv, concat_list
from farm.media.join import CONCAT, MP4JOIN, JoinResult, join_segments, probe_joined
from farm.media.master import Probed
from farm.media.probe import probe_streams
from farm.media.transcode_spec import build_transcode_spec
from tests.integration.conftest import make_job
from tests.integration.test_attempt import FakeDispatch
from workers.attempt.context import WorkerContext
from workers.host.gpu import Capabilities
from workers.phases.stitch import stitch_frames
from workers.phases.transcode_stitch import stitch_master

FPS = Fraction(24)
TICK = 1000  # the segments' timescale is 24000


def segment(
    out: Path,
    frames: int,
    colour: str,
    *,
    codec: str = "h264",
    encoder: str = "libx264",
    preset: str = "ultrafast",
    size: str = "64x48",
) -> Path:
    settings = EncodeSettings(codec=codec, encoder=encoder, fps=FPS, preset=preset)
    stream = ffmpeg.input(f"color=c={colour}:size={size}:rate={FPS}", f="lavfi").output(
        str(out), vframes=frames, **codec_options(settings, frames)
    )
    subprocess.run(stream.global_args(*GLOBAL_ARGS).compile(), check=True, capture_output=True)
    return out


def join(parts: list[Path], out: Path) -> JoinResult:
    counts = [probe_streams("ffprobe", p).frames for p in parts]
    return join_segments(
        paths=iter(parts),
        lengths=[(n, Fraction(n) / FPS) for n in counts],
        out=out,
        concat=lambda list_file, _: concat_argv(
            ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=sum(counts)
        ),
    )


def decoded(path: Path) -> list[str]:
    """Every frame's checksum, decoded in presentation order."""
    text = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:v:0", "-f", "framemd5", "-"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [line.rsplit(",", 1)[1].strip() for line in text.splitlines() if line[:1] != "#"]


def packets(path: Path) -> list[dict[str, Any]]:
    text = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_packets",
         "-show_entries", "packet=pts,dts,duration,flags", "-of", "json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    found: list[dict[str, Any]] = json.loads(text)["packets"]
    return found


def top_level_boxes(path: Path) -> list[str]:
    """The MP4's top-level box types in file order (ftyp, free, moov, mdat, ...)."""
    boxes, data, at = [], path.read_bytes(), 0
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        if size == 1:
            size = struct.unpack(">Q", data[at + 8 : at + 16])[0]
        boxes.append(kind.decode())
        at += size if size else len(data)
    return boxes


def test_segments_join_frame_exact_with_the_index_before_the_media(tmp_path: Path) -> None:
    parts = [segment(tmp_path / f"{i}.mp4", 12, c) for i, c in enumerate(("red", "blue", "red"))]
    list_file = tmp_path / "list.txt"
    list_file.write_text(concat_list([(p, Fraction(12) / FPS) for p in parts]))
    out = tmp_path / "out.mp4"
    assert run(concat_argv(ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=36)).ok
    info = probe_streams("ffprobe", out)
    assert (info.frames, info.fps) == (36, FPS)
    boxes = top_level_boxes(out)
    assert boxes.index("moov") < boxes.index("mdat")  # a player can start before the end arrives


def test_b_frame_segments_of_every_length_join_frame_exact(tmp_path: Path) -> None:
    # GIVEN x264 segments with B-frames, as short as a split leaves them and of other lengths
    lengths = (12, 1, 2, 5, 3)
    parts = [
        segment(tmp_path / f"{i}.mp4", n, c, preset="medium")
        for i, (n, c) in enumerate(
            zip(lengths, ("red", "blue", "green", "white", "black"), strict=True)
        )
    ]
    out = tmp_path / "out.mp4"
    # WHEN they are joined
    result = join(parts, out)
    # THEN by mp4join, index first, with every frame's timestamps back to back across the joins
    assert (result.method, result.fallback) == (MP4JOIN, "")
    boxes = top_level_boxes(out)
    assert boxes.index("moov") < boxes.index("mdat")
    found = packets(out)
    assert int(found[0]["dts"]) < 0  # B-frames: decoding runs ahead of presentation
    assert [int(p["dts"]) for p in found] == [
        found[0]["dts"] + n * TICK for n in range(sum(lengths))
    ]
    assert sorted(int(p["pts"]) for p in found) == [n * TICK for n in range(sum(lengths))]
    keyframes = [n for n, p in enumerate(found) if "K" in p["flags"]]
    assert keyframes == [0, 12, 13, 15, 20]
    # AND it decodes to exactly the segments' frames, in order
    assert decoded(out) == [frame for part in parts for frame in decoded(part)]
    info = probe_joined("ffprobe", out, result, sum(lengths), FPS)
    assert (info.frames, info.fps, info.codec) == (23, FPS, "h264")


@pytest.mark.parametrize(
    ("codec", "encoder", "ext"),
    [("hevc10", "libx265", "mp4"), ("prores", "prores_ks", "mov"), ("av1", "libsvtav1", "mp4")],
)
def test_other_codecs_join_by_mp4join_too(
    tmp_path: Path, codec: str, encoder: str, ext: str
) -> None:
    parts = [
        segment(tmp_path / f"{i}.{ext}", n, c, codec=codec, encoder=encoder, preset="medium",
                size="128x72")
        for i, (n, c) in enumerate(((4, "red"), (1, "blue"), (3, "green")))
    ]  # fmt: skip
    out = tmp_path / f"out.{ext}"
    result = join(parts, out)
    assert result.method == MP4JOIN, result.fallback
    assert sorted(int(p["pts"]) for p in packets(out)) == [n * TICK for n in range(8)]
    assert decoded(out) == [frame for part in parts for frame in decoded(part)]


def test_segments_with_other_decoder_settings_fall_back_to_the_concat_demuxer(
    tmp_path: Path,
) -> None:
    # GIVEN two segments whose SPS differ (x264 ultrafast has no B-frames, medium does)
    parts = [
        segment(tmp_path / "0.mp4", 6, "red", preset="ultrafast"),
        segment(tmp_path / "1.mp4", 6, "blue", preset="medium"),
    ]
    out = tmp_path / "out.mp4"
    # WHEN they are joined
    result = join(parts, out)
    # THEN ffmpeg joins them, the reason is kept, and every frame is there
    assert result.method == CONCAT and "sample description differs" in result.fallback
    assert probe_joined("ffprobe", out, result, 12, FPS).frames == 12


class SegmentStore:
    """The Store calls a stitch makes, over local files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects: dict[str, Any] = {}

    def put_segment(self, key: str, path: Path) -> None:
        self.objects[key] = path

    def get_json(self, key: str) -> Any:
        return self.objects[key]

    def get_file(self, key: str, path: Path) -> None:
        path.write_bytes(self.objects[key].read_bytes())

    def put_file_once(self, key: str, path: Path) -> bool:
        if key in self.objects:
            return False
        kept = self.root / key.replace("/", "_")
        kept.write_bytes(path.read_bytes())
        self.objects[key] = kept
        return True


def stored_segments(
    store: SegmentStore,
    tmp_path: Path,
    cuts: list[tuple[int, int, int, str]],
    encoder: dict[str, Any],
) -> None:
    """(chunk, first frame, frames, colour) -> a segment and its manifest in `store`."""
    for index, first, count, colour in cuts:
        part = segment(tmp_path / f"seg{index}.mp4", count, colour, preset="medium")
        key = keys.segment_key("j1", index, 1)
        store.put_segment(key, part)
        store.objects[keys.manifest_key("j1", index, None)] = {
            "frame_count": count,
            "frames": [{"frame": first + n} for n in range(count)],
            "encoder": encoder,
            "segment": {"key": key, "size": part.stat().st_size, "sha256": sha256_file(part),
                        "frames": count, "fps": "24"},
        }  # fmt: skip


def context(ledger: Ledger, store: SegmentStore, tmp_path: Path) -> WorkerContext:
    return WorkerContext(
        settings=Settings(), ledger=ledger, store=store,  # type: ignore[arg-type]
        dispatch=FakeDispatch(), caps=Capabilities(), name="w1", scratch=tmp_path / "w",  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_split_chunk_joins_in_frame_order(ledger: Ledger, tmp_path: Path) -> None:
    # GIVEN frames 1-8 in chunks 0 (1-2, split), 1 (5-8) and 2 (3-4, the rest of chunk 0)
    spec = make_job(ledger, frames="1-8", chunk_size=4, resolution="64x48", samples=1)
    ledger.r.hset(keys.r_job("j1"), mapping={"state": "stitching", "chunks_total": 3})
    ledger.r.hset(keys.r_chunk("j1", 2), mapping={"index": 2, "state": "done"})  # the split's
    store = SegmentStore(tmp_path)
    cuts = [(0, 1, 2, "red"), (1, 5, 4, "blue"), (2, 3, 2, "green")]
    stored_segments(store, tmp_path, cuts, {"name": "libx264"})
    # WHEN the stitch runs
    result = stitch_frames(context(ledger, store, tmp_path), "j1", ledger.job("j1"), spec)
    # THEN the video shows chunk 0, then its rest, then chunk 1, and the job is done
    out = store.objects[str(result["output"])]
    assert decoded(out) == [frame for i in (0, 2, 1) for frame in decoded(tmp_path / f"seg{i}.mp4")]
    job = ledger.job("j1")
    assert (job["state"], job["stitch_join"]) == ("done", MP4JOIN)


def test_a_transcode_without_audio_joins_by_mp4join(ledger: Ledger, tmp_path: Path) -> None:
    # GIVEN a silent 12-frame master cut into segments of 5, 5 and 2 frames
    master = MasterInfo(
        container="mov,mp4", codec="h264", width=64, height=48, frame_count=12,
        avg_frame_rate="24", time_base="1/24000", start_pts=0, format_start_s=0.0,
        duration_s=0.5, vfr=False,
    )  # fmt: skip
    spec = build_transcode_spec(
        source_name="m.mov", probed=Probed(info=master), resolution="64x48", codec="h264",
        quality=None, encoder="software", preset="medium", segment_frames=5,
    )  # fmt: skip
    ledger.create_job(job_id="j1", spec=spec, chunks=plan_chunks(spec.frames, 5), source_key="k")
    ledger.r.hset(keys.r_job("j1"), mapping={"state": "stitching", "chunks_total": 3})
    store = SegmentStore(tmp_path)
    encoder = {"name": "libx264", "quality": 20, "preset": "medium"}
    stored_segments(
        store, tmp_path, [(0, 0, 5, "red"), (1, 5, 5, "blue"), (2, 10, 2, "green")], encoder
    )
    # WHEN the stitch runs
    result = stitch_master(context(ledger, store, tmp_path), "j1", ledger.job("j1"), spec)
    # THEN mp4join joined every frame, in order
    out = store.objects[str(result["output"])]
    assert decoded(out) == [frame for i in range(3) for frame in decoded(tmp_path / f"seg{i}.mp4")]
    job = ledger.job("j1")
    assert (job["state"], job["stitch_join"]) == ("done", MP4JOIN)


def test_a_deliverable_the_store_did_not_serve_is_retried_not_failed(tmp_path: Path) -> None:
    """Found by a review: ffprobe of the joined object over its URL failing on the network (a
    refused connection, a 503) failed the job and deleted a good deliverable."""
    from farm.core.errors import PermanentError, StoreError
    from farm.media.join import probe_header

    with pytest.raises(StoreError, match="could not read the video from the store"):
        probe_header("ffprobe", "http://127.0.0.1:1/jobs/j1/output.mp4?X-Amz-Signature=s")
    bad = tmp_path / "output.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(PermanentError) as refused:
        probe_header("ffprobe", bad)
    assert not isinstance(refused.value, StoreError)
