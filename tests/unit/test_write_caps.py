"""What an attempt writes: every object under its own claim's name, File Output files within
their caps, logs cut to theirs (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.core import keys
from farm.core.errors import Refused
from farm.ledger.base import FrameRecord, records_of
from workers.attempt.logcap import kept_log
from workers.phases.frames import OutputCaps


def test_every_object_an_attempt_writes_is_named_by_its_claim() -> None:
    def written(chunk: int, claim: int) -> set[str]:
        writer = keys.writer(chunk, claim)
        return {
            keys.frame_key("j", 12, writer),
            keys.thumb_key("j", 12, writer),
            keys.master_key("j", 12, "frame_000012.exr", writer),
            keys.file_output_key("j", 12, "Depth/Image0012.exr", writer),
            keys.segment_key("j", chunk, claim),
            keys.log_key("j", chunk, 1, "render", claim),
        }

    assert written(3, 1).isdisjoint(written(3, 2))
    # A split gives frame 12 to a new chunk, whose first claim is 1 again.
    assert written(3, 1).isdisjoint(written(4, 1))
    assert keys.master_key("j", 12, "frame_000012.exr", "3-7") == (
        "jobs/j/masters/000012.c3-7/frame_000012.exr"
    )


def test_a_frame_folder_names_its_frame_and_claim() -> None:
    prefix = keys.file_outputs_prefix("j")
    key = keys.file_output_key("j", 12, "Depth/Image0012.exr", "3-7")
    assert keys.in_frame_folder(key, prefix) == (12, "3-7", "Depth/Image0012.exr")
    assert keys.in_frame_folder(prefix + "Depth/Image0012.exr", prefix) is None  # before folders


def test_records_name_their_writer_and_older_ones_none() -> None:
    assert records_of({"3": "10:ab:0-7", "4": "11:cd"}) == {
        3: FrameRecord(10, "ab", "0-7"),
        4: FrameRecord(11, "cd", None),
    }


def test_file_output_files_within_the_caps_pass() -> None:
    OutputCaps(frame_bytes=10, job_bytes=20).check(1, 10, 10)


@pytest.mark.parametrize(
    ("frame_bytes", "job_bytes", "setting"),
    [(11, 0, "file_output_frame_max_bytes"), (10, 11, "file_output_job_max_bytes")],
)
def test_file_output_files_over_a_cap_are_refused_naming_it(
    frame_bytes: int, job_bytes: int, setting: str
) -> None:
    with pytest.raises(Refused, match=f"frame 4: .* over the cap .*; raise {setting}"):
        OutputCaps(frame_bytes=10, job_bytes=20).check(4, frame_bytes, job_bytes)


def test_a_log_within_the_cap_is_kept_whole(tmp_path: Path) -> None:
    log = tmp_path / "render.log"
    log.write_bytes(b"Fra:1\n" * 100)
    assert kept_log(log, 600) == b"Fra:1\n" * 100


def test_a_log_over_the_cap_keeps_whole_lines_of_its_head_and_tail(tmp_path: Path) -> None:
    log = tmp_path / "render.log"
    lines = [b"line %06d\n" % n for n in range(10_000)]
    log.write_bytes(b"".join(lines))
    kept = kept_log(log, 4096)
    assert len(kept) <= 4096
    assert kept.startswith(lines[0]) and kept.endswith(lines[-1])
    kept_lines = kept.splitlines(keepends=True)
    cut = [line for line in kept_lines if line not in lines]
    assert len(cut) == 1 and b"bytes of this log cut here" in cut[0]  # only whole lines besides
