"""What a job's source is, as read at submit: a scene as its .blend saved it (farm.blender.blendfile
reads it) and a video master as ffprobe found it (farm.media.master probes it). Plain values the
job spec records; reading them is the adapters' work."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from farm.core.hdr import HdrInfo

CYCLES_DEFAULT_SAMPLES = 4096
"""What Cycles renders with (3.0 and later) when the file stores no sample count of its own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SceneInfo:
    """The render settings of the scene a .blend file opens with, as saved."""

    scene: str
    blender_version: str
    """The Blender release that saved the file, e.g. "4.5" (from the file header)."""
    frame_start: int
    frame_end: int
    frame_step: int
    fps: int
    fps_base: float
    """Blender's frame rate is fps / fps_base: 24 / 1.001 for 23.976."""
    resolution_x: int
    resolution_y: int
    resolution_percentage: int
    camera: str | None
    engine: str
    samples: int | None
    """Render samples of the scene's engine; None when the file does not store them (Blender's
    default applies) or the engine has none (Workbench)."""
    denoising: bool | None
    """Cycles denoising; None for engines without it."""
    view_layers: tuple[str, ...]
    """View layers enabled for rendering."""
    file_format: str
    color_depth: str
    color_mode: str
    cameras: tuple[str, ...] = ()
    """Camera objects stored in the file itself (linked ones are not listed)."""
    output_path: str | None = None
    """The scene's Output path as saved (`//render/shot010_####`), which names the frames
    `farm fetch --frames` writes (farm.core.naming); None for jobs submitted before it was
    recorded."""
    file_extension: bool = True
    """The Output panel's File Extensions switch (use_file_extension)."""
    marker_cameras: tuple[str, ...] = ()
    """Cameras the timeline's markers switch to (Bind Camera to Markers), in frame order."""
    view: dict[str, Any] | None = None
    """The scene's colour management (view_transform, look, exposure, gamma, display_device,
    curves): what a tiled still's merge writes its denoised image with (farm.core.tiles); None
    where it was not read (scenes submitted before it was)."""

    @property
    def rate(self) -> Fraction:
        """The exact frame rate: 24000/1001 for 23.976, not a rounded float."""
        base = Fraction(self.fps_base).limit_denominator(1001) if self.fps_base > 0 else 1
        return Fraction(self.fps) / base

    @property
    def render_size(self) -> tuple[int, int]:
        """Width and height Blender renders (resolution times percentage), before any rounding."""
        scale = self.resolution_percentage
        return self.resolution_x * scale // 100, self.resolution_y * scale // 100

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["view_layers"] = list(self.view_layers)
        data["cameras"] = list(self.cameras)
        data["marker_cameras"] = list(self.marker_cameras)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SceneInfo:
        tuples = {
            name: tuple(data.get(name, ())) for name in ("view_layers", "cameras", "marker_cameras")
        }
        return cls(**{**data, **tuples})


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioStream:
    index: int
    """The stream's index among the master's audio streams (ffmpeg's `a:N`)."""
    codec: str
    channels: int
    sample_rate: int
    start_s: float
    duration_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MasterStream:
    """A stream of the master other than the video the farm encodes, and what the job does
    with it (farm.media.streams plans it at submit)."""

    index: int
    """ffprobe's index of the stream in the master (`0:N`)."""
    kind: str
    """audio, subtitle, data, attachment or video (a second picture, cover art)."""
    kind_index: int
    """Its index among the master's streams of its kind: ffmpeg's `a:N`, `s:N`, `d:N`, `t:N`."""
    codec: str
    language: str = ""
    """ISO 639-2 (three letters), or '' when the master names none."""
    title: str = ""
    default: bool = False
    forced: bool = False
    action: str = ""
    """What happens to it: farm.media.streams.Action (copy, aac, mov_text, timecode, drop)."""
    packets: int = 0
    """A copied bitmap subtitle's cues in the master (the stitch counts them in the deliverable);
    0 for every other stream."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MasterInfo:
    """What the segments and the stitch need to know about a master, recorded in the job spec."""

    container: str
    codec: str
    width: int
    height: int
    frame_count: int
    """Video frames in the master (packets the demuxer does not discard)."""
    avg_frame_rate: str
    """The output's constant rate, as an exact fraction: `24000/1001`."""
    time_base: str
    start_pts: int
    """The first video frame's timestamp, in `time_base` units (often not zero)."""
    format_start_s: float
    """The earliest timestamp of any stream: what ffmpeg subtracts from every input timestamp."""
    duration_s: float
    vfr: bool
    audio: tuple[AudioStream, ...] = ()
    seek_pts: tuple[int, ...] = ()
    """Per segment: the timestamp of a keyframe safely before its first frame (start_pts: none)."""
    scene_cuts: tuple[int, ...] = ()
    """Frames where a scene cut starts, found at submit (farm.media.scenecuts); () when not scanned."""
    segment_starts: tuple[int, ...] = ()
    """Each segment's first frame when boundaries moved to scene cuts; (): every chunk_size frames."""
    segment_seek_pts: tuple[int, ...] = ()
    """With segment_starts: per segment, its seek point (as seek_pts is per chunk_size frames)."""
    hdr: HdrInfo | None = None
    """An HDR master's tags and metadata (farm.core.hdr); None for an SDR master."""
    streams: tuple[MasterStream, ...] = ()
    """Every stream but the encoded video, each with its plan; () in specs from before plans
    (their audio alone is carried)."""
    chapters: int = 0
    """The master's chapters, carried into the deliverable (0: none, or dropped)."""
    timecode: str = ""
    """The master's start timecode (`01:00:00:00`), carried; '' when none or dropped."""
    dropped: tuple[str, ...] = ()
    """What --drop named that is not a stream: `chapters`, `timecode`."""
    field_order: str = ""
    """ffprobe's field_order of an interlaced master (tt, bb, tb, bt); '' when progressive."""
    deinterlace: bool = False
    """Deinterlace it (bwdif, a frame per frame) before the cut; asked for with --deinterlace."""

    @property
    def rate(self) -> Fraction:
        return Fraction(self.avg_frame_rate)

    @property
    def tb(self) -> Fraction:
        return Fraction(self.time_base)

    @property
    def start_s(self) -> float:
        return float(self.start_pts * self.tb)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["hdr"] = self.hdr.to_json() if self.hdr else None
        data["streams"] = [asdict(s) for s in self.streams]
        data["dropped"] = list(self.dropped)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MasterInfo:
        audio = tuple(AudioStream(**a) for a in data.get("audio", ()))
        seek = tuple(int(s) for s in data.get("seek_pts", ()))
        hdr = HdrInfo.from_json(data["hdr"]) if data.get("hdr") else None
        cuts = ("scene_cuts", "segment_starts", "segment_seek_pts")  # farm.media.scenecuts
        plans = ("streams", "dropped")  # farm.media.streams
        skip = ("audio", "seek_pts", "hdr", *cuts, *plans)
        rest = {k: v for k, v in data.items() if k not in skip}
        return cls(
            audio=audio,
            streams=tuple(MasterStream(**s) for s in data.get("streams") or ()),
            dropped=tuple(str(d) for d in data.get("dropped") or ()),
            seek_pts=seek,
            hdr=hdr,
            scene_cuts=_ints(data.get("scene_cuts")),
            segment_starts=_ints(data.get("segment_starts")),
            segment_seek_pts=_ints(data.get("segment_seek_pts")),
            **rest,
        )


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in values or ())
