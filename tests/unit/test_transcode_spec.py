import json

import pytest

from farm.core.errors import SpecError
from farm.core.sources import AudioStream, MasterInfo
from farm.core.spec import Codec, EncoderChoice, JobKind, JobSpec, build_render_spec
from farm.media.master import Probed
from farm.media.transcode_spec import build_transcode_spec, vfr_note

MASTER = MasterInfo(
    container="mov,mp4",
    codec="prores",
    width=1920,
    height=1080,
    frame_count=240,
    avg_frame_rate="24000/1001",
    time_base="1/24000",
    start_pts=0,
    format_start_s=0.0,
    duration_s=10.01,
    vfr=False,
    audio=(AudioStream(index=0, codec="pcm_s24le", channels=2, sample_rate=48000,
                       start_s=0.0, duration_s=10.01),),
)  # fmt: skip
PROBED = Probed(info=MASTER, keyframes_pts=(0,))


def _spec(**overrides: object) -> JobSpec:
    options: dict[str, object] = {
        "resolution": None,
        "codec": "hevc",
        "quality": None,
        "encoder": "auto",
        "preset": "medium",
        "segment_frames": None,
    }
    options.update(overrides)
    return build_transcode_spec(source_name="master.mov", probed=PROBED, **options)  # type: ignore[arg-type]


def test_an_encode_job_defaults_to_4k_and_segments_of_about_ten_seconds() -> None:
    spec = _spec()
    assert spec.kind is JobKind.TRANSCODE
    assert str(spec.resolution) == "3840x2160"
    assert (spec.frames.first, spec.frames.last, spec.chunk_size) == (0, 239, 240)
    assert spec.master is not None and spec.master.seek_pts == (0,)
    assert spec.encoder is EncoderChoice.AUTO


def test_av1_and_the_user_resolution_are_taken() -> None:
    spec = _spec(codec="av1", resolution="1920x1080", segment_frames=48, quality=35)
    assert (spec.codec, str(spec.resolution), spec.chunk_size, spec.quality) == (
        Codec.AV1, "1920x1080", 48, 35
    )  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"codec": "vp9"}, "--codec 'vp9': choose one of h264, hevc, av1"),
        ({"encoder": "quicksync"}, "--encoder 'quicksync': choose one of auto, nvenc, software"),
        ({"quality": 52}, "--quality 52: choose between 0 (best) and 51"),
        ({"preset": "warp"}, "--preset 'warp'"),
        ({"segment_frames": 0}, "--segment-frames 0"),
        ({"resolution": "3841x2160"}, "odd side"),
    ],
)
def test_bad_encode_options_are_refused_with_the_option_named(
    overrides: dict[str, object], words: str
) -> None:
    with pytest.raises(SpecError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _spec(**overrides)


def test_an_encode_spec_round_trips_through_json() -> None:
    spec = _spec(quality=18, encoder="software", preset="fast")
    assert JobSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_a_render_spec_still_round_trips_without_encode_fields() -> None:
    spec = build_render_spec(
        source_name="s.blend", frames="1-24", chunk_size=8, resolution="320x180", fps=24,
        samples=4, codec="h264",
    )  # fmt: skip
    data = spec.to_json()
    assert JobSpec.from_json(json.loads(json.dumps(data))) == spec
    assert spec.master is None


def test_only_a_variable_rate_master_gets_a_note() -> None:
    assert vfr_note(_spec()) == ""
    vfr = Probed(info=MasterInfo.from_json({**MASTER.to_json(), "vfr": True}), keyframes_pts=(0,))
    spec = build_transcode_spec(
        source_name="phone.mp4", probed=vfr, resolution=None, codec="h264", quality=None,
        encoder="auto", preset="medium", segment_frames=None,
    )  # fmt: skip
    assert "variable frame rate" in vfr_note(spec)
    assert "24000/1001 fps" in vfr_note(spec)
