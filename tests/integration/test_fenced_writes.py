"""Fenced writes on a real SeaweedFS and Redis: an attempt that lost its chunk's claim writes
beside the winner's objects, never over them, and records nothing; the delivered output is
written once; File Output files and logs stay within their caps."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from farm.adapters import store as store_module
from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control.jobs import frame_files
from farm.core import keys
from farm.core.errors import LeaseLost, ObjectChanged, PermanentError, Refused
from farm.core.pipeline import PHASES, Phase
from farm.core.state import ChunkState
from farm.ledger import Ledger
from tests.integration.conftest import make_job
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt
from workers.host.gpu import Capabilities
from workers.phases import stitch
from workers.phases.frames import FrameUploader, OutputCaps

RENDER = PHASES[Phase.RENDER]


def _claim(ledger: Ledger, job_id: str) -> str:
    token = ledger.move_chunk(job_id, 0, RENDER.running, mode="claim", lease_s=30).token
    assert token
    return token


def _take_back(ledger: Ledger, job_id: str) -> None:
    """What the reconciler does to a chunk whose lease it saw expire."""
    ledger.move_chunk(job_id, 0, ChunkState.QUEUED, only_from=frozenset({RENDER.running}))


def _writer(token: str) -> str:
    """What a claim of chunk 0 writes under (keys.writer)."""
    return keys.writer(0, int(token.split(":", 1)[1].split("-", 1)[0]))


def _claim_number(token: str) -> int:
    return int(token.split(":", 1)[1].split("-", 1)[0])


def _render(folder: Path, body: bytes) -> tuple[Path, Path, Path, Path]:
    """Frame 1 as the render script leaves it: preview, master, thumbnail, a File Output file."""
    folder.mkdir()
    (folder / "out" / "Depth").mkdir(parents=True)
    files = (folder / "preview.png", folder / "frame_000001.exr", folder / "thumb.jpg",
             folder / "out" / "Depth" / "Image0001.exr")  # fmt: skip
    for n, path in enumerate(files):
        path.write_bytes(body + bytes([n]))
    return files


def _upload(store: Store, ledger: Ledger, job_id: str, token: str, folder: Path,
            body: bytes, caps: OutputCaps | None = None) -> FrameUploader:  # fmt: skip
    preview, master, thumb, _ = _render(folder, body)
    uploader = FrameUploader(
        store, ledger, job_id, 0, _claim_number(token), token, caps=caps or OutputCaps()
    )
    uploader.start()
    uploader.add(1, preview, (master,), thumb, outputs=("Depth/Image0001.exr",),
                 outputs_dir=folder / "out")  # fmt: skip
    uploader.finish()
    return uploader


def test_a_stale_attempts_late_upload_leaves_the_winners_frame_passes_and_master(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    """GIVEN a chunk's claim taken away from an attempt and its frame made and recorded by the
    attempt that won the chunk WHEN the stale attempt uploads the same frame late THEN the
    winner's frame, master, File Output file and thumbnail keep their bytes, the record names the
    winner, the stale attempt fails as a lost lease, and `farm fetch --frames` takes the
    winner's files only."""
    make_job(ledger, "fenced", frames="1-4", chunk_size=4)
    stale = _claim(ledger, "fenced")
    _take_back(ledger, "fenced")
    winner = _claim(ledger, "fenced")
    _upload(store, ledger, "fenced", winner, tmp_path / "winner", b"winner").raise_errors()
    late = _upload(store, ledger, "fenced", stale, tmp_path / "stale", b"stale")

    with pytest.raises(LeaseLost, match="another attempt's"):
        late.raise_errors()
    won = _writer(winner)
    record = ledger.frame_records("fenced")[1]
    assert record == (len(b"winner") + 1, hashlib.sha256(b"winner\x00").hexdigest(), won)
    assert store.get_bytes(keys.frame_key("fenced", 1, won)) == b"winner\x00"
    assert store.get_bytes(keys.master_key("fenced", 1, "frame_000001.exr", won)) == b"winner\x01"
    assert store.get_bytes(keys.thumb_key("fenced", 1, won)) == b"winner\x02"
    depth = keys.file_output_key("fenced", 1, "Depth/Image0001.exr", won)
    assert store.get_bytes(depth) == b"winner\x03"
    # The stale attempt's objects lie beside the winner's, under its own claim.
    lost = _writer(stale)
    assert store.get_bytes(keys.frame_key("fenced", 1, lost)) == b"stale\x00"
    assert ledger.render_counts("fenced") == {1: 1}
    found = frame_files(store, "fenced", ledger.frame_records("fenced"))
    fetched = {str(path): store.get_bytes(key) for key, path in found}
    assert fetched == {"frame_000001.exr": b"winner\x01",
                       "file_output/Depth/Image0001.exr": b"winner\x03"}  # fmt: skip


def test_a_delivered_output_is_written_once(store: Store, tmp_path: Path) -> None:
    """GIVEN an object at the output's key WHEN another write of it comes, in one PUT or in parts
    THEN the store keeps the first one."""
    first, second = tmp_path / "first.mp4", tmp_path / "second.mp4"
    first.write_bytes(b"the winner's video")
    second.write_bytes(b"x" * 5000)
    assert store.put_file_once("once/output.mp4", first)
    assert not store.put_file_once("once/output.mp4", second)
    with pytest.MonkeyPatch.context() as patch:  # a file this size counts as one sent in parts
        patch.setattr(store_module, "ONE_PUT_BYTES", 1000)
        assert not store.put_file_once("once/output.mp4", second)
        assert store.put_file_once("once/parts.mp4", second)
    assert store.get_bytes("once/output.mp4") == b"the winner's video"
    assert store.get_bytes("once/parts.mp4") == b"x" * 5000
    assert store.multipart_uploads("once/") == []  # the refused one was aborted


def test_a_store_join_completes_only_where_no_output_is(store: Store) -> None:
    store.put_bytes("once/joined.mp4", b"delivered")
    upload = store.create_multipart("once/joined.mp4")
    etag = store.upload_part("once/joined.mp4", upload, 1, b"a later stitch's")
    with pytest.raises(ObjectChanged):
        store.complete_multipart("once/joined.mp4", upload, [etag], only_new=True)
    store.abort_multipart("once/joined.mp4", upload)
    assert store.get_bytes("once/joined.mp4") == b"delivered"


def _ctx(store: Store, ledger: Ledger, tmp_path: Path, **settings: int) -> WorkerContext:
    return WorkerContext(
        settings=Settings(lease_s=30, **settings),  # type: ignore[arg-type]
        ledger=ledger,
        store=store,
        dispatch=None,  # type: ignore[arg-type]
        caps=Capabilities(),
        name="w1",
        scratch=tmp_path,
    )


def test_a_retried_stitch_takes_the_output_it_finds_only_if_it_is_its_own(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    """GIVEN a stitch that stored the output and crashed before the job was recorded done WHEN
    the stitch runs again THEN the same video is taken, and another one fails
    the stitch naming the key, the stored output unchanged."""
    make_job(ledger, "retried", frames="1-4", chunk_size=4)
    ctx = _ctx(store, ledger, tmp_path)
    video = tmp_path / "output.mp4"
    video.write_bytes(b"joined once")
    key = keys.output_key("retried")
    assert store.put_file_once(key, video)  # the first stitch, which then crashed

    assert stitch.deliver(ctx, "retried", video, time.monotonic()) == key  # no error: taken

    video.write_bytes(b"joined otherwise")
    with pytest.raises(PermanentError, match=f"{key} is in the store already"):
        stitch.deliver(ctx, "retried", video, time.monotonic())
    assert store.get_bytes(key) == b"joined once"


def test_file_output_files_over_the_frame_cap_fail_the_chunk_naming_the_setting(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    make_job(ledger, "capped", frames="1-4", chunk_size=4)
    token = _claim(ledger, "capped")
    uploader = _upload(store, ledger, "capped", token, tmp_path / "f", b"passes",
                       caps=OutputCaps(frame_bytes=6))  # fmt: skip
    with pytest.raises(Refused, match=r"7 bytes, over the cap of 6 bytes per frame; raise "
                       r"file_output_frame_max_bytes \(FARM_FILE_OUTPUT_FRAME_MAX_BYTES\)"):  # fmt: skip
        uploader.raise_errors()
    assert store.keys(keys.file_outputs_prefix("capped")) == []
    assert ledger.frame_records("capped") == {}


def test_the_jobs_file_output_bytes_are_counted_across_attempts_against_the_job_cap(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    """GIVEN a frame whose File Output files (7 bytes) were recorded WHEN the next attempt's
    frame would take the job's past its cap THEN that frame is refused, naming the setting."""
    make_job(ledger, "jobcap", frames="1-4", chunk_size=4)
    first = _claim(ledger, "jobcap")
    _upload(store, ledger, "jobcap", first, tmp_path / "a", b"passes").raise_errors()
    assert ledger.job("jobcap")["file_output_bytes"] == "7"
    _take_back(ledger, "jobcap")
    token = _claim(ledger, "jobcap")
    preview, master, thumb, _ = _render(tmp_path / "b", b"passes")
    uploader = FrameUploader(store, ledger, "jobcap", 0, _claim_number(token), token,
                             caps=OutputCaps(job_bytes=13),
                             job_output_bytes=int(ledger.job("jobcap")["file_output_bytes"]))  # fmt: skip
    uploader.start()
    uploader.add(1, preview, (master,), thumb, outputs=("Depth/Image0001.exr",),
                 outputs_dir=tmp_path / "b" / "out")  # fmt: skip
    uploader.finish()
    with pytest.raises(Refused, match=r"would be 14 bytes, over the cap of 13 bytes per "
                       r"job; raise file_output_job_max_bytes"):  # fmt: skip
        uploader.raise_errors()


def test_a_log_over_the_cap_is_stored_cut_with_a_marker(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    """GIVEN a Blender that printed far more than the log cap WHEN the attempt uploads its log
    THEN the store holds its first and last lines and a marker saying how much was cut, within
    the cap, under the attempt's claim."""
    make_job(ledger, "chatty", frames="1-4", chunk_size=4)
    token = _claim(ledger, "chatty")
    ctx = _ctx(store, ledger, tmp_path, log_max_bytes=8192)
    attempt = ChunkAttempt(ctx, ledger.job("chatty"), 0, RENDER, token)
    attempt.log_path.parent.mkdir(parents=True)
    lines = [f"Fra:{n} Mem:12M | Rendering {n} / 100000\n" for n in range(100_000)]
    attempt.log_path.write_text("".join(lines))

    attempt.upload_log()
    kept = store.get_bytes(keys.log_key("chatty", 0, 1, "render", _claim_number(token)))
    assert len(kept) <= 8192
    assert kept.startswith(lines[0].encode()) and kept.endswith(lines[-1].encode())
    assert b"bytes of this log cut here" in kept
