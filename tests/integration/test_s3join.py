"""The stitch's join in the object store (workers.phases.s3join) against a real SeaweedFS: byte for
byte what mp4join writes here, refused for segments under a part's 5 MiB (the stitch then joins
them here), and no upload left behind when it fails."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import ffmpeg
import pytest

from farm.adapters.settings import Settings
from farm.adapters.store import Store, sha256_file
from farm.control.reconcile import Pass, Reconciler
from farm.core import keys
from farm.core.errors import ObjectChanged, PermanentError, StoreError
from farm.ledger import Ledger
from farm.ledger.jobs import EARLY_PART, EARLY_UPLOAD
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options
from farm.media.join import MP4JOIN
from farm.media.mp4join import Mp4Join
from farm.media.mp4track import CannotJoin
from tests.conftest import ffprobe
from tests.integration.conftest import make_job
from tests.integration.test_attempt import FakeDispatch
from workers.attempt.context import WorkerContext
from workers.host.gpu import Capabilities
from workers.phases import s3join
from workers.phases.stitch import SegmentRef, stitch_frames

FPS = Fraction(24)
BIG_FRAMES = 8
"""Frames of 1280x720 noise at CRF 10: about 6.5 MiB a segment, over a part's 5 MiB."""


def segment(
    out: Path, frames: int, shade: int, *, size: str, quality: int, faststart: bool
) -> Path:
    """A closed-GOP segment with the farm's segment options, of noise that compresses badly."""
    settings = EncodeSettings(
        codec="h264", encoder="libx264", fps=FPS, preset="ultrafast", quality=quality
    )
    source = f"nullsrc=s={size}:r={FPS},geq=random(1)*255:{shade}:128"
    options = codec_options(settings, frames)
    if faststart:
        options["movflags"] = "+faststart"
    stream = ffmpeg.input(source, f="lavfi").output(str(out), vframes=frames, **options)
    subprocess.run(stream.global_args(*GLOBAL_ARGS).compile(), check=True, capture_output=True)
    return out


def stored(
    store: Store, job_id: str, parts: list[Path], firsts: list[int] | None = None
) -> list[SegmentRef]:
    """Each segment and its manifest in the store, as a chunk leaves them; `firsts`: their
    first frames (by default 1,000 apart)."""
    refs = []
    firsts = firsts or [index * 1000 for index in range(len(parts))]
    for index, part in enumerate(parts):
        frames = ffprobe(part)["streams"][0]["nb_frames"]
        key = keys.segment_key(job_id, index, 1)
        etag = store.put_file(key, part)
        store.put_json(keys.manifest_key(job_id, index, None), {
            "frame_count": int(frames), "frames": {"first": firsts[index]},
            "encoder": {"name": "libx264"},
            "segment": {"key": key, "size": part.stat().st_size, "sha256": sha256_file(part),
                        "frames": int(frames), "fps": "24", "etag": etag},
        })  # fmt: skip
        refs.append(SegmentRef(
            index=index, key=key, size_bytes=part.stat().st_size, sha256=sha256_file(part),
            frames=int(frames), fps=FPS, encoder={"name": "libx264"}, first=(firsts[index], index),
            etag=etag,
        ))  # fmt: skip
    return refs


@pytest.fixture(scope="module")
def big(
    store: Store, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Path], list[SegmentRef]]:
    """Four 720p segments of 8 frames, each over 5 MiB of samples; two with the index first
    (`+faststart`), two with it last as the farm writes them."""
    work = tmp_path_factory.mktemp("big")
    parts = [
        segment(work / f"{i}.mp4", BIG_FRAMES, 90 + 20 * i, size="1280x720", quality=10,
                faststart=i % 2 == 1)
        for i in range(4)
    ]  # fmt: skip
    return parts, stored(store, "big", parts)


def context(ledger: Ledger, store: Store, tmp_path: Path) -> WorkerContext:
    return WorkerContext(
        settings=Settings(), ledger=ledger, store=store,
        dispatch=FakeDispatch(), caps=Capabilities(), name="w1", scratch=tmp_path / "w",  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_store_joins_segments_byte_for_byte_as_mp4join_does(
    store: Store, big: tuple[list[Path], list[SegmentRef]], tmp_path: Path
) -> None:
    # GIVEN four stored segments of over 5 MiB each
    parts, refs = big
    frames = BIG_FRAMES * len(parts)
    # WHEN the store joins them
    plan = s3join.plan(store, refs, frames)
    s3join.assemble(store, plan, "out/joined.mp4")
    # THEN the object is the very file mp4join makes of them here
    local = tmp_path / "local.mp4"
    with Mp4Join(local, frames=frames) as join:
        for part in parts:
            join.add(part, BIG_FRAMES)
        assert join.finish() == plan.joined
    store.get_file("out/joined.mp4", tmp_path / "joined.mp4")
    assert (tmp_path / "joined.mp4").read_bytes() == local.read_bytes()
    # AND it decodes to every frame, and no upload is left open
    assert int(ffprobe(tmp_path / "joined.mp4")["streams"][0]["nb_read_frames"]) == frames
    assert store.multipart_uploads() == []


def test_a_stitch_of_large_segments_is_joined_in_the_store(
    ledger: Ledger, store: Store, big: tuple[list[Path], list[SegmentRef]], tmp_path: Path
) -> None:
    # GIVEN a job whose four segments are stored with their manifests
    spec = make_job(ledger, job_id="big", frames="1-32", chunk_size=8, resolution="1280x720")
    ledger.r.hset(keys.r_job("big"), mapping={"state": "stitching", "chunks_total": 4})
    # WHEN the stitch runs
    result = stitch_frames(context(ledger, store, tmp_path), "big", ledger.job("big"), spec)
    # THEN the store joined them, and the job is done with the whole video
    job = ledger.job("big")
    assert (job["state"], job["stitch_join"], result["frames"]) == ("done", s3join.S3COPY, 32)
    assert int(job["output_size"]) == store.size(str(result["output"]))
    assert store.multipart_uploads() == []


class _CountingStore:
    """The store, counting the parts it copies."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.copied = inner, list[int]()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def upload_part_copy(self, key: str, upload_id: str, number: int, *args: Any, **kw: Any) -> str:
        self.copied.append(number)
        return self.inner.upload_part_copy(key, upload_id, number, *args, **kw)


def test_segments_copied_as_they_are_made_leave_the_stitch_one_part_to_copy(
    ledger: Ledger, store: Store, big: tuple[list[Path], list[SegmentRef]], tmp_path: Path
) -> None:
    # GIVEN a job of four 8-frame chunks whose segments are stored as their chunks leave them,
    # each copied into the job's upload as it was made (the first is the stitch's first part)
    parts, _ = big
    spec = make_job(ledger, job_id="early", frames="1-32", chunk_size=8, resolution="1280x720")
    refs = stored(store, "early", parts, firsts=[1, 9, 17, 25])
    output = keys.output_key("early")
    made = [
        s3join.copy_early(
            store, ledger, job_id="early", output_key=output, segment=part, key=ref.key,
            etag=ref.etag, position=8 * ref.index, total=32,
        )
        for ref, part in zip(refs, parts, strict=True)
    ]  # fmt: skip
    assert made[0] == {} and all(EARLY_PART in m for m in made[1:])
    assert [s3join.EarlyPart.parse(m[EARLY_PART]).number for m in made[1:]] == [  # type: ignore[union-attr]
        2 + 8 * 9998 // 32, 2 + 16 * 9998 // 32, 2 + 24 * 9998 // 32,
    ]  # fmt: skip
    upload = ledger.job("early")[EARLY_UPLOAD]
    assert store.multipart_uploads() == [(output, upload)]
    for ref, fields in zip(refs[1:], made[1:], strict=True):
        ledger.set_chunk_fields("early", ref.index, **fields)
    # AND chunk 2's segment made again since (its copy no longer matches its manifest's ETag)
    stale = s3join.EarlyPart.parse(made[2][EARLY_PART])
    assert stale is not None
    ledger.set_chunk_fields(
        "early", 2, early_part=str(dataclasses.replace(stale, source_etag='"other"'))
    )
    ledger.r.hset(keys.r_job("early"), mapping={"state": "stitching", "chunks_total": 4})
    # WHEN the stitch runs
    counting = _CountingStore(store)
    ctx = context(ledger, counting, tmp_path)  # type: ignore[arg-type]
    result = stitch_frames(ctx, "early", ledger.job("early"), spec)
    # THEN it copied only chunk 2's part again, into the job's upload, now complete
    assert counting.copied == [stale.number]
    assert ledger.job("early")["stitch_join"] == s3join.S3COPY and result["frames"] == 32
    assert store.multipart_uploads() == []
    # AND the video is the very file mp4join makes of the segments
    local = tmp_path / "local.mp4"
    with Mp4Join(local, frames=32) as join:
        for part in parts:
            join.add(part, BIG_FRAMES)
        join.finish()
    store.get_file(output, tmp_path / "joined.mp4")
    assert (tmp_path / "joined.mp4").read_bytes() == local.read_bytes()


def test_a_cancelled_jobs_early_upload_is_aborted_and_a_retry_begins_anew(
    ledger: Ledger, store: Store, big: tuple[list[Path], list[SegmentRef]]
) -> None:
    # GIVEN a job whose segments were copied into its upload as they were made, then cancelled
    parts, _ = big
    make_job(ledger, job_id="gone", frames="1-32", chunk_size=8, resolution="1280x720")
    output = keys.output_key("gone")
    for ref, part in zip(stored(store, "gone", parts, firsts=[1, 9, 17, 25]), parts, strict=True):
        fields = s3join.copy_early(
            store, ledger, job_id="gone", output_key=output, segment=part, key=ref.key,
            etag=ref.etag, position=8 * ref.index, total=32,
        )  # fmt: skip
        if fields:  # the first segment is the stitch's first part, never copied early
            ledger.set_chunk_fields("gone", ref.index, **fields)
    upload = ledger.job("gone")[EARLY_UPLOAD]
    assert sum(EARLY_PART in c for c in ledger.chunks("gone")) == 3
    # AND a running job's upload, begun the same way
    make_job(ledger, job_id="live")
    live = store.create_multipart(keys.output_key("live"))
    assert ledger.job_field_once("live", EARLY_UPLOAD, live) == live
    assert sorted(store.multipart_uploads()) == sorted(
        [(output, upload), (keys.output_key("live"), live)]
    )
    ledger.cancel_job("gone")
    # WHEN the reconciler passes before the kept hour is over, then twice after it
    dispatch: Any = FakeDispatch()
    rec = Reconciler(ledger, dispatch, max_lost_leases=6, store=store, early_upload_keep_s=3600)
    passes = [Pass(), Pass(), Pass()]
    rec.abort_early_uploads(passes[0])
    assert len(store.multipart_uploads()) == 2 and ledger.job("gone")[EARLY_UPLOAD] == upload
    for later in passes[1:]:
        rec.abort_early_uploads(later, now=time.time() + 3601)
    # THEN the cancelled job's upload and its parts are gone, and the ledger forgot them, once
    assert [p.aborted for p in passes] == [[], ["gone"], []]
    assert store.multipart_uploads() == [(keys.output_key("live"), live)]
    assert EARLY_UPLOAD not in ledger.job("gone")
    assert not any(EARLY_PART in c for c in ledger.chunks("gone"))
    assert ledger.job("live")[EARLY_UPLOAD] == live
    # AND aborting it again is no error (a pass that aborted but could not tell the ledger)
    store.abort_multipart(output, upload)
    # AND a job retried before the ledger was told keeps its upload's name: its stitch, finding
    # the upload aborted, joins anew
    assert ledger.job_field_once("gone", EARLY_UPLOAD, upload) == upload
    ledger.reopen_job("gone", every_unfinished=True)
    assert not ledger.forget_early_upload("gone", upload)
    assert ledger.job("gone")[EARLY_UPLOAD] == upload
    store.abort_multipart(keys.output_key("live"), live)


def test_segments_under_a_part_size_are_left_to_the_join_here(
    ledger: Ledger, store: Store, tmp_path: Path
) -> None:
    # GIVEN a job of two small segments
    parts = [
        segment(tmp_path / f"{i}.mp4", 4, 100 + 50 * i, size="64x48", quality=20, faststart=False)
        for i in range(2)
    ]
    refs = stored(store, "small", parts)
    # WHEN the store is asked to join them, THEN it refuses, saying why
    with pytest.raises(CannotJoin, match="under a part's 5 MiB"):
        s3join.plan(store, refs, 8)
    # AND the stitch joins them here with mp4join
    spec = make_job(ledger, job_id="small", frames="1-8", chunk_size=4, resolution="64x48")
    ledger.r.hset(keys.r_job("small"), mapping={"state": "stitching", "chunks_total": 2})
    result = stitch_frames(context(ledger, store, tmp_path), "small", ledger.job("small"), spec)
    assert ledger.job("small")["stitch_join"] == MP4JOIN
    assert result["frames"] == 8


@pytest.mark.parametrize("limit", ["MAX_FIRST_PART_BYTES", "MAX_PART_BYTES"])
def test_a_segment_over_what_a_part_may_hold_is_left_to_the_join_here(
    store: Store, big: tuple[list[Path], list[SegmentRef]], monkeypatch: pytest.MonkeyPatch,
    limit: str,
) -> None:  # fmt: skip
    """Found by a review: a first segment of gigabytes was read into memory to be part 1 (the
    worker killed for it, the stitch redelivered to die again), and one over 5 GiB was a part
    S3 refuses, so the job failed where the join on a worker would have made it."""
    monkeypatch.setattr(s3join, limit, 1 << 20)  # the real limits, scaled down to the test's
    with pytest.raises(CannotJoin, match="over what its part may hold"):
        s3join.plan(store, big[1], 4 * BIG_FRAMES)


def test_a_join_that_fails_midway_leaves_no_upload_behind(
    store: Store, big: tuple[list[Path], list[SegmentRef]]
) -> None:
    # GIVEN a plan whose third segment is gone from the store by the time it is copied
    _, refs = big
    plan = s3join.plan(store, refs, BIG_FRAMES * len(refs))
    pieces = list(plan.pieces)
    pieces[2] = ("jobs/big/segments/gone.mp4", *pieces[2][1:])
    # WHEN the store joins it, THEN the error names the missing segment
    with pytest.raises(StoreError, match=r"gone\.mp4"):
        s3join.assemble(store, dataclasses.replace(plan, pieces=pieces), "out/failed.mp4")
    # AND the upload was aborted, and no object made
    assert store.multipart_uploads() == []
    assert not store.exists("out/failed.mp4")


def test_a_segment_gone_from_the_store_fails_the_stitch_at_once_saying_what_to_do(
    store: Store, big: tuple[list[Path], list[SegmentRef]]
) -> None:
    """Found by a review: a segment gone from the store (a lifecycle rule, a deletion) was read
    again as a transient error until the stitch gave up, and the errors said to retry a chunk,
    which no retry does for a done one."""
    copies = stored(store, "gone", big[0])
    store.delete(copies[2].key)
    with pytest.raises(
        PermanentError,
        match=r"segment 2 is gone from the store; .*farm retry. makes that chunk again",
    ):
        s3join.plan(store, copies, BIG_FRAMES * len(copies))


def test_a_segment_replaced_after_its_manifest_is_refused_not_joined(
    store: Store, big: tuple[list[Path], list[SegmentRef]], tmp_path: Path
) -> None:
    # GIVEN a job's segments, the second since overwritten by other bytes of the same size (a
    # late attempt of its chunk, say)
    parts, _ = big
    copies = stored(store, "replaced", parts)
    other = tmp_path / "other.mp4"
    other.write_bytes(bytes(reversed(parts[1].read_bytes())))
    store.put_file(copies[1].key, other)
    # WHEN the store is asked to join them, THEN it refuses that segment as its manifest's
    with pytest.raises(PermanentError, match="segment 1 does not match its manifest"):
        s3join.plan(store, copies, BIG_FRAMES * len(parts))
    # AND a plan made before the swap cannot copy the new bytes either
    fresh = stored(store, "swapped", parts)
    plan = s3join.plan(store, fresh, BIG_FRAMES * len(parts))
    store.put_file(fresh[2].key, other)
    with pytest.raises(ObjectChanged, match="no longer the object that was recorded"):
        s3join.assemble(store, plan, "out/swapped.mp4")
    assert store.multipart_uploads() == [] and not store.exists("out/swapped.mp4")


def test_manifests_without_an_etag_are_joined_here() -> None:
    ref = SegmentRef(index=0, key="k", size_bytes=10 << 20, sha256="", frames=8, fps=FPS,
                     encoder={"name": "libx264"}, first=(0, 0))  # fmt: skip
    assert "no ETag" in s3join.unfit([ref, ref])


@pytest.mark.parametrize("size", [1000, 70 * 1024 * 1024], ids=["one-put", "multipart"])
def test_an_open_frame_is_stored_as_opened_whatever_its_name_points_to_by_then(
    store: Store, tmp_path: Path, size: int
) -> None:
    """workers.host.box.open_boxed then Store.put_open: a box script that swaps the frame for a link to
    a host file after it was opened and checked gets the checked bytes stored, in one PUT and in
    parallel parts alike (those read the open file's own inode)."""
    from workers.host.box import open_boxed

    frame, secret = tmp_path / "frame_000001.exr", tmp_path / "config.json"
    frame.write_bytes(os.urandom(size))
    secret.write_text('{"redis_password": "hunter2"}')
    with open_boxed(frame) as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
        frame.unlink()
        frame.symlink_to(secret)
        store.put_open(f"t/{size}", fh, intermediate=True)
    back = tmp_path / "back"
    store.get_file(f"t/{size}", back)
    assert back.stat().st_size == size
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest
