"""A chunk's frames on their way out of Blender: each uploaded and recorded as it is saved, so
rendering never waits on the store; those already stored and verified skipped; those past a
split left to the split's new chunk (the permit file tells the render script where to stop).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from farm.adapters.settings import Settings
from farm.adapters.store import ONE_PUT_BYTES, Store
from farm.core import keys
from farm.core.errors import (
    FarmError,
    LeaseLost,
    ObjectChanged,
    PermanentError,
    Refused,
    StoreRefused,
    TransientError,
)
from farm.ledger import FrameRecord, Ledger
from workers.attempt.context import WorkerContext
from workers.host.box import open_boxed, open_boxed_under
from workers.phases import thumbnail

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Saved:
    """A frame Blender saved, waiting for its upload (FrameUploader.add)."""

    frame: int
    path: Path
    masters: tuple[Path, ...]
    thumb: Path | None
    outputs: tuple[str, ...]
    outputs_dir: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputCaps:
    """What a scene's File Output nodes may write (Settings.file_output_frame_max_bytes,
    file_output_job_max_bytes): the scene, which is untrusted, decides how much it writes, so
    the farm decides how much it stores."""

    frame_bytes: int = Settings.model_fields["file_output_frame_max_bytes"].default
    job_bytes: int = Settings.model_fields["file_output_job_max_bytes"].default

    @classmethod
    def from_settings(cls, settings: Settings) -> OutputCaps:
        return cls(
            frame_bytes=settings.file_output_frame_max_bytes,
            job_bytes=settings.file_output_job_max_bytes,
        )

    def check(self, frame: int, frame_bytes: int, job_bytes: int) -> None:
        """Refuse a frame whose File Output files, or the job's with them, pass a cap: another
        try of the same scene writes the same (Refused: the chunk fails at once)."""
        if frame_bytes > self.frame_bytes:
            raise Refused(
                f"frame {frame}: its File Output files are {frame_bytes} bytes, over the cap of "
                f"{self.frame_bytes} bytes per frame; raise file_output_frame_max_bytes "
                "(FARM_FILE_OUTPUT_FRAME_MAX_BYTES) or have the scene's File Output nodes write "
                "less"
            )
        if job_bytes + frame_bytes > self.job_bytes:
            raise Refused(
                f"frame {frame}: the job's File Output files would be {job_bytes + frame_bytes} "
                f"bytes, over the cap of {self.job_bytes} bytes per job; raise "
                "file_output_job_max_bytes (FARM_FILE_OUTPUT_JOB_MAX_BYTES) or have the scene's "
                "File Output nodes write less"
            )


def frame_metadata(sha256: str) -> dict[str, str]:
    """The frame's record in the store (keys.FRAME_SHA256)."""
    return {keys.FRAME_SHA256: sha256}


@dataclass(slots=True)
class FrameUploader:
    """Uploads frames in the background as Blender saves them, so rendering never waits on S3.
    Every object goes under the attempt's claim (keys.writer, keys.frame_key, frame_folder) and
    each frame's record names it, recorded only while the chunk is still the attempt's: an
    attempt that lost its claim and uploads late writes beside the winner's objects, never over
    them, and records nothing."""

    store: Store
    ledger: Ledger
    job_id: str
    chunk: int
    claim: int = 0
    """The attempt's claim of `chunk` (ChunkAttempt.claim): with the chunk, its objects' names."""
    token: str = ""
    """The attempt's claim token: its records are refused once the chunk is another's ('':
    recorded whoever holds it)."""
    caps: OutputCaps = field(default_factory=OutputCaps)
    job_output_bytes: int = 0
    """The job's File Output bytes as last recorded (the claim's job hash, then each record)."""
    done: list[int] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    upload_s: float = 0.0
    reused: int = 0
    """Frames of the chunk an earlier attempt stored: the chunk's progress counts on from them,
    never back from 1 (farm status, watch and the page show it)."""
    kept_until: Callable[[], int | None] = lambda: None
    """The chunk's last frame since a split (LeaseKeeper.split_last), None before one: a frame
    after it is the split's new chunk's, never stored or recorded by this one."""
    _queue: queue.Queue[_Saved | None] = field(default_factory=queue.Queue)
    _thread: threading.Thread | None = None
    _started: tuple[int, float] | None = None

    @property
    def writer(self) -> str:
        return keys.writer(self.chunk, self.claim)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="frame-upload")
        self._thread.start()

    def add(
        self,
        frame: int,
        path: Path,
        masters: tuple[Path, ...] = (),
        thumb: Path | None = None,
        *,
        outputs: tuple[str, ...] = (),
        outputs_dir: Path = Path(),
    ) -> None:
        """`path`: the display-referred image the video is made of; `masters`: the frame in the
        scene's own format (EXR, 16-bit PNG), kept for `farm fetch --frames`; `thumb`: its
        thumbnail for the job page, uploaded once the frame is recorded; `outputs`: what the
        scene's File Output nodes wrote for it, relative to `outputs_dir`."""
        self._queue.put(_Saved(frame, path, masters, thumb, outputs, outputs_dir))

    def starting(self, frame: int, frame_s: float) -> None:
        """Record the frame Blender starts and its mean frame time so far: a split of this chunk
        (farm.core.split) leaves that frame and the next few, by time, to this attempt."""
        started = (frame, round(frame_s, 3))
        if started == self._started:  # the attempt's first frame, told again by Blender
            return
        try:
            self.ledger.set_chunk_fields(
                self.job_id, self.chunk, frame_on=frame, frame_s_live=started[1],
                frame_on_at=round(time.time(), 3),
            )  # fmt: skip
            self._started = started
        except FarmError as exc:  # only a split waits on it; the next frame records again
            log.warning("could not record frame %d as started: %s", frame, exc)

    def raise_errors(self) -> None:
        """Store or Redis hiccups hand the chunk back (no attempt spent); anything else fails it."""
        if not self.errors:
            return
        lost = [e for e in self.errors if isinstance(e, LeaseLost)]
        if lost:  # its records refused: nothing of this attempt counts
            raise lost[0]
        text = "; ".join(str(e) for e in self.errors[:5])
        if all(isinstance(e, TransientError) for e in self.errors):
            raise TransientError(f"{len(self.errors)} frame uploads failed: {text}")
        capped = [e for e in self.errors if isinstance(e, Refused)]
        if capped:  # over one of the farm's caps: another try writes the same
            raise Refused(f"{len(self.errors)} frame uploads failed: {capped[0]}")
        refused = [e for e in self.errors if isinstance(e, StoreRefused)]
        if refused:  # the store said no (403, no bucket, full): another try would hear the same
            raise StoreRefused(f"{len(self.errors)} frame uploads failed: {refused[0]}")
        raise PermanentError(f"{len(self.errors)} frame uploads failed: {text}")

    def finish(self) -> None:
        self._queue.put(None)
        if self._thread:
            self._thread.join()

    def _store(self, saved: _Saved) -> tuple[int, str, int]:
        """Store the frame's File Output files and masters, then the frame the video is made
        of; its size and sha256, read from the very file stored (what is recorded is what is
        stored), and the File Output bytes stored. Where the render script made the frame's
        file its preview too (one file, linked), its bytes are sent once: the store copies the
        master just sent to the frame's key."""
        frame, path, masters, writer = saved.frame, saved.path, saved.masters, self.writer
        output_bytes = self._store_outputs(saved)
        frame_key = keys.frame_key(self.job_id, frame, writer)
        stored: tuple[int, str] | None = None
        for master in masters:  # before the record: a recorded frame has its masters
            with open_boxed(master) as fh:
                key = keys.master_key(self.job_id, frame, master.name, writer)
                etag = self.store.put_open(key, fh)
                if stored is not None or not _copyable(fh, path):
                    continue
                stored = _measure(fh)
                record = frame_metadata(stored[1])
                try:
                    self.store.copy(key, frame_key, etag=etag, intermediate=True, metadata=record)
                except ObjectChanged:  # not the bytes just sent: send them again
                    self.store.put_open(frame_key, fh, intermediate=True, metadata=record)
        if stored is None:
            with open_boxed(path) as fh:
                stored = _measure(fh)
                self.store.put_open(
                    frame_key, fh, intermediate=True, metadata=frame_metadata(stored[1])
                )
        return *stored, output_bytes

    def _store_outputs(self, saved: _Saved) -> int:
        """Store what the frame's File Output nodes wrote, within the caps (OutputCaps); the
        bytes stored. Every file is opened, and measured, before the first is sent."""
        with ExitStack() as opened:
            files = [
                (name, opened.enter_context(open_boxed_under(saved.outputs_dir, name)))
                for name in saved.outputs
            ]
            total = sum(os.fstat(fh.fileno()).st_size for _, fh in files)
            self.caps.check(saved.frame, total, self.job_output_bytes)
            for name, fh in files:  # before the record, like the masters
                key = keys.file_output_key(self.job_id, saved.frame, name, self.writer)
                self.store.put_open(key, fh)
        return total

    def _split_off(self, frame: int) -> bool:
        """Whether `frame` is the split's new chunk's now: it renders and records it."""
        last = self.kept_until()
        if last is None or frame <= last:
            return False
        log.info("frame %d is another chunk's since a split at %d; not recorded", frame, last)
        return True

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            frame, thumb = item.frame, item.thumb
            if self._split_off(frame):  # begun before the split was heard
                continue
            started = time.monotonic()
            try:
                size, digest, output_bytes = self._store(item)
                if self._split_off(frame):  # split while it was uploading
                    continue
                # The record, the chunk's progress and (once an attempt; the job keeps the
                # earliest) the job's first-frame time: one round trip.
                first = not self.done
                recorded = self.ledger.record_frame(
                    self.job_id, frame, size, digest, writer=self.writer, token=self.token,
                    output_bytes=output_bytes, chunk=self.chunk, first=first,
                    frames_rendered=self.reused + len(self.done) + 1,
                )  # fmt: skip
                self.job_output_bytes = recorded.job_output_bytes
                if not recorded.recorded:
                    raise LeaseLost(f"frame {frame}: chunk {self.chunk} is another attempt's now")
                self.done.append(frame)
            except Exception as exc:  # reported after Blender ends
                log.exception("upload of frame %d failed", frame)
                self.errors.append(exc)
            else:
                self._thumbnail(frame, thumb, first)
                if item.outputs:  # stored: nothing here reads them again
                    shutil.rmtree(item.outputs_dir, ignore_errors=True)
            self.upload_s += time.monotonic() - started

    def _thumbnail(self, frame: int, thumb: Path | None, first: bool) -> None:
        """Every recorded frame's thumbnail is uploaded; the first one's time is the job's too.
        Neither fails the chunk: its frame is stored and recorded."""
        try:
            uploaded = thumb is not None and thumbnail.upload(
                self.store, self.job_id, frame, self.writer, thumb
            )
            if uploaded and first:  # the job keeps the earliest
                when = f"{time.time():.3f}"
                self.ledger.job_field_once(self.job_id, "first_thumbnail_at", when)
        except Exception:
            log.exception("the thumbnail of frame %d was not recorded", frame)


def _measure(fh: io.BufferedReader) -> tuple[int, str]:
    """The open file's size and sha256, read from its start."""
    fh.seek(0)
    return os.fstat(fh.fileno()).st_size, hashlib.file_digest(fh, "sha256").hexdigest()


def _copyable(fh: BinaryIO, path: Path) -> bool:
    """Whether the master just sent from `fh` may be copied to the frame's key: it is the file
    at `path` now (the same inode, never through a link), sent in one PUT (in parts, its ETag is
    read after the upload, when another attempt may have written the key, so a copy insisting
    on it could copy that one's bytes)."""
    here = os.fstat(fh.fileno())
    try:
        there = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    same = (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
    return same and here.st_size < ONE_PUT_BYTES


def frames_to_render(
    ctx: WorkerContext,
    job_id: str,
    frames: list[int],
    records: dict[int, FrameRecord],
) -> list[int]:
    """Skip frames whose verified record exists and whose object is in the store at that size.
    `records`: the frames' records (ChunkAttempt.records: the claim brought them back)."""
    todo = []
    for frame in frames:
        record = records.get(frame)
        if record and ctx.store.size(keys.frame_key(job_id, frame, record.writer)) == record[0]:
            continue
        todo.append(frame)
    return todo


def kept(frames: list[int], split_last: int | None) -> list[int]:
    """The frames still this chunk's after a split at `split_last` (None: not split)."""
    return frames if split_last is None else [f for f in frames if f <= split_last]


def write_permit(path: Path, last: int) -> None:
    """Tell the render script to stop after frame `last` (it reads the file before each frame);
    written whole, then renamed, so the script never reads half of it."""
    partial = path.with_name(path.name + ".partial")
    # The folder is the box's: a link planted at the name must not make this write elsewhere.
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"last": last}))
    os.replace(partial, path)
