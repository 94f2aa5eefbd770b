"""The NVENC probe is a real one-frame test encode; `auto` follows what it finds."""

from __future__ import annotations

import shutil

from farm.core.sources import MasterInfo
from farm.media.master import Probed
from farm.media.transcode_spec import build_transcode_spec
from workers.host import gpu
from workers.phases.transcode import pick_encoder

MASTER = MasterInfo(
    container="mov,mp4", codec="h264", width=1920, height=1080, frame_count=24,
    avg_frame_rate="24/1", time_base="1/24", start_pts=0, format_start_s=0.0, duration_s=1.0,
    vfr=False,
)  # fmt: skip


def test_without_an_nvidia_gpu_the_probe_reports_no_nvenc_and_auto_picks_software() -> None:
    caps = gpu.probe(blender="blender", ffmpeg="ffmpeg")
    spec = build_transcode_spec(
        source_name="m.mov", probed=Probed(info=MASTER), resolution=None, codec="hevc",
        quality=None, encoder="auto", preset="medium", segment_frames=None,
    )  # fmt: skip
    if not shutil.which("nvidia-smi"):
        assert caps.gpus == ()
        assert caps.nvenc is False
        assert caps.nvenc_error == "no NVIDIA GPU"
    assert pick_encoder(spec, caps.nvenc, caps.nvenc_error) == (
        "hevc_nvenc" if caps.nvenc else "libx265"
    )


def test_the_test_encode_itself_fails_with_a_reason_where_there_is_no_encoder() -> None:
    works, reason = gpu.nvenc_works("ffmpeg")
    if not shutil.which("nvidia-smi"):
        assert works is False
        assert reason  # ffmpeg's own last words, e.g. "Cannot load libcuda.so.1"
    else:
        assert works or reason
