"""A frame on its way into a real SeaweedFS (workers.phases.frames.FrameUploader): where the render script
made the frame's file its preview too (one file, linked), its bytes are sent once and the store
copies them; otherwise each file is sent."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from farm.adapters.store import INTERMEDIATE_TAG, Store
from farm.core import keys
from farm.core.errors import ObjectMissing, PermanentError, StoreError
from farm.ledger import Ledger
from workers.phases import frames
from workers.phases.frames import FrameUploader


class Counted:
    """The store, counting what goes through this host and what the store copies."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sent: list[str] = []
        self.copied: list[tuple[str, str]] = []

    def put_open(
        self, key: str, body: Any, *, intermediate: bool = False, metadata: Any = None
    ) -> str:
        self.sent.append(key)
        return self.store.put_open(key, body, intermediate=intermediate, metadata=metadata)

    def copy(
        self, source: str, key: str, *, etag: str = "", intermediate: bool = False,
        metadata: Any = None,
    ) -> str:  # fmt: skip
        self.copied.append((source, key))
        return self.store.copy(source, key, etag=etag, intermediate=intermediate,
                               metadata=metadata)  # fmt: skip


def _upload(store: Counted, ledger: Ledger, job_id: str, frame: int, preview: Path,
            master: Path) -> FrameUploader:  # fmt: skip
    uploader = FrameUploader(store, ledger, job_id, 0)  # type: ignore[arg-type]
    uploader.start()
    uploader.add(frame, preview, masters=(master,))
    uploader.finish()
    uploader.raise_errors()
    return uploader


def _linked(tmp_path: Path, frame: int, data: bytes) -> tuple[Path, Path]:
    """A frame's file and its preview, one file under two names, as the render script links
    them."""
    master = tmp_path / f"frame_{frame:06d}.png"
    master.write_bytes(data)
    preview = tmp_path / f"preview_{frame:06d}.png"
    os.link(master, preview)
    return master, preview


def _sent_itself(store: Store, counted: Counted, job_id: str, frame: int, master: Path,
                 data: bytes) -> str:  # fmt: skip
    """Check the master and then the frame went up from this host, nothing copied; the frame's
    key."""
    frame_key = keys.frame_key(job_id, frame, "0-0")
    assert counted.sent == [keys.master_key(job_id, frame, master.name, "0-0"), frame_key]
    assert counted.copied == []
    assert store.get_bytes(frame_key) == data
    return frame_key


def _tags(store: Store, key: str) -> str:
    tags = store.s3.get_object_tagging(Bucket=store.bucket, Key=key)["TagSet"]
    return "&".join(f"{t['Key']}={t['Value']}" for t in tags)


def test_a_frame_that_is_its_preview_is_sent_once_and_copied_by_the_store(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    master, preview = _linked(tmp_path, 7, os.urandom(300_000))
    counted = Counted(store)
    uploader = _upload(counted, ledger, "linked", 7, preview, master)
    master_key, frame_key = (
        keys.master_key("linked", 7, master.name, "0-0"),
        keys.frame_key("linked", 7, "0-0"),
    )
    assert counted.sent == [master_key]
    assert counted.copied == [(master_key, frame_key)]
    assert store.get_bytes(frame_key) == store.get_bytes(master_key) == master.read_bytes()
    # The frame expires with the job's intermediates; the master is kept.
    assert _tags(store, frame_key) == INTERMEDIATE_TAG
    assert _tags(store, master_key) == ""
    record = ledger.frame_records("linked")[7]
    assert record == (300_000, hashlib.sha256(master.read_bytes()).hexdigest(), "0-0")
    assert uploader.done == [7]
    # The copy carries the frame's record (its sha256) as its own metadata.
    assert store.head_metadata(frame_key) == (300_000, store.head(frame_key)[1],  # type: ignore[index]
                                              {"sha256": record.sha256})  # fmt: skip


def test_a_preview_saved_apart_is_sent_itself(store: Store, ledger: Ledger, tmp_path: Path) -> None:
    master = tmp_path / "frame_000003.exr"
    master.write_bytes(b"exr" * 1000)
    preview = tmp_path / "preview_000003.png"
    preview.write_bytes(b"png" * 500)
    counted = Counted(store)
    _upload(counted, ledger, "apart", 3, preview, master)
    frame_key = _sent_itself(store, counted, "apart", 3, master, b"png" * 500)
    assert _tags(store, frame_key) == INTERMEDIATE_TAG
    assert ledger.frame_records("apart")[3][0] == 1500
    # The frame's record is in the store too (its size, and its sha256 as metadata): a ledger
    # rebuilt from the store reads it back (farm.control.rebuild).
    size, _, metadata = store.head_metadata(frame_key) or (0, "", {})
    assert (size, metadata) == (1500, {"sha256": ledger.frame_records("apart")[3].sha256})


class Overwritten(Counted):
    """The master changes between this attempt's upload and its copy."""

    def copy(
        self, source: str, key: str, *, etag: str = "", intermediate: bool = False,
        metadata: Any = None,
    ) -> str:  # fmt: skip
        self.store.put_bytes(source, b"another attempt's frame")
        return super().copy(source, key, etag=etag, intermediate=intermediate, metadata=metadata)


def test_a_master_replaced_before_its_copy_is_not_copied_the_frame_is_sent(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    master, preview = _linked(tmp_path, 5, b"this attempt's frame")
    counted = Overwritten(store)
    _upload(counted, ledger, "raced", 5, preview, master)
    frame_key = keys.frame_key("raced", 5, "0-0")
    assert counted.copied == [(keys.master_key("raced", 5, master.name, "0-0"), frame_key)]
    assert counted.sent[-1] == frame_key
    assert store.get_bytes(frame_key) == b"this attempt's frame"
    recorded = ledger.frame_records("raced")[5][1]
    assert recorded == hashlib.sha256(b"this attempt's frame").hexdigest()


def test_a_frame_sent_in_parts_is_sent_again_not_copied(
    store: Store, ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master uploaded in parts has its ETag read after the upload, when another attempt may
    have written the key: no copy insists on it; the frame goes up itself."""
    monkeypatch.setattr(frames, "ONE_PUT_BYTES", 1000)  # this frame counts as one in parts
    master, preview = _linked(tmp_path, 9, b"x" * 5000)
    counted = Counted(store)
    _upload(counted, ledger, "parts", 9, preview, master)
    _sent_itself(store, counted, "parts", 9, master, b"x" * 5000)


def test_a_download_of_an_object_not_there_says_so(store: Store, tmp_path: Path) -> None:
    """A StoreError still (retried where it may yet appear), told apart where it never will."""
    with pytest.raises(ObjectMissing, match="no such object"):
        store.get_file("jobs/none/frames/000001.png", tmp_path / "f.png")
    assert issubclass(ObjectMissing, StoreError)
    assert not (tmp_path / "f.png").exists()


def _file_outputs(tmp_path: Path, frame: int) -> Path:
    folder = tmp_path / f"outputs_{frame:06d}"
    (folder / "Depth").mkdir(parents=True)
    (folder / "Depth" / f"Image{frame:04d}.exr").write_bytes(b"depth")
    (folder / f"Passes{frame:04d}.exr").write_bytes(b"passes")
    return folder


def test_a_frames_file_output_files_are_stored_before_its_record(
    store: Store, ledger: Ledger, tmp_path: Path
) -> None:
    """GIVEN what the scene's File Output nodes wrote for frame 4 WHEN the frame is uploaded THEN
    each is stored as the nodes laid it out, before the frame and its record, kept (not an
    intermediate), and the local copies are gone."""
    master, preview = _linked(tmp_path, 4, b"frame four")
    folder = _file_outputs(tmp_path, 4)
    counted = Counted(store)
    uploader = FrameUploader(counted, ledger, "passes", 0)  # type: ignore[arg-type]
    uploader.start()
    names = ("Depth/Image0004.exr", "Passes0004.exr")
    uploader.add(4, preview, (master,), outputs=names, outputs_dir=folder)
    uploader.finish()
    uploader.raise_errors()
    stored = [keys.file_output_key("passes", 4, n, "0-0") for n in names]
    assert counted.sent[:2] == stored
    assert store.get_bytes(stored[0]) == b"depth"
    assert store.get_bytes(stored[1]) == b"passes"
    assert _tags(store, stored[0]) == ""
    assert 4 in ledger.frame_records("passes")
    assert not folder.exists()


@pytest.mark.parametrize("swapped", ["node", "frame"])
def test_a_file_output_folder_swapped_for_a_link_fails_the_frame_unrecorded(
    store: Store, ledger: Ledger, tmp_path: Path, swapped: str
) -> None:
    """A trusted scene's script swaps a node's folder, or the frame's outputs folder, for a link
    to a host folder after the frame was announced: nothing from there is stored, and the frame
    is not recorded."""
    job_id = f"swapped-{swapped}"
    master, preview = _linked(tmp_path, 6, b"frame six")
    folder = _file_outputs(tmp_path, 6)
    host = tmp_path / "host"
    (host / "Depth").mkdir(parents=True)
    (host / "Image0006.exr").write_bytes(b"secret")
    (host / "Depth" / "Image0006.exr").write_bytes(b"secret")
    link = folder / "Depth" if swapped == "node" else folder
    shutil.rmtree(link)
    link.symlink_to(host / "Depth" if swapped == "node" else host, target_is_directory=True)
    uploader = FrameUploader(store, ledger, job_id, 0)
    uploader.start()
    uploader.add(6, preview, (master,), outputs=("Depth/Image0006.exr",), outputs_dir=folder)
    uploader.finish()
    with pytest.raises(PermanentError, match="cannot be read as a file"):
        uploader.raise_errors()
    assert store.keys(keys.file_outputs_prefix(job_id)) == []
    assert 6 not in ledger.frame_records(job_id)
