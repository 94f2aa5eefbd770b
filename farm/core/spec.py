"""What a user asks for, validated once at the edge: a JobSpec, or a SpecError that says what to fix."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any

from farm.core.errors import SpecError
from farm.core.sources import CYCLES_DEFAULT_SAMPLES, MasterInfo, SceneInfo

MAX_WIDTH, MAX_HEIGHT = 7680, 4320
MAX_FRAMES = 1_000_000
AUTO_CHUNK = 0
"""JobSpec.chunk_size of `--chunk-size auto`: sized by farm.core.chunking from a probe wave."""
_RANGE = re.compile(r"^\s*(-?\d+)\s*(?:-\s*(-?\d+))?\s*(?::\s*(-?\d+))?\s*$")


def fps_fraction(fps: float) -> Fraction:
    """24 -> 24/1; 23.976 -> 24000/1001; 29.97 -> 30000/1001 (NTSC rates are exact fractions)."""
    for base in (24, 30, 48, 60, 120):
        if abs(fps - base * 1000 / 1001) < 0.005:
            return Fraction(base * 1000, 1001)
    return Fraction(fps).limit_denominator(1001)


class JobKind(StrEnum):
    RENDER = "render"
    """A .blend scene rendered frame by frame, then encoded and stitched."""
    TRANSCODE = "transcode"
    """An existing video master transcoded in frame-exact segments, then stitched."""

    @classmethod
    def parse(cls, text: str) -> JobKind:
        """A kind by name; `encode`, this kind's name before 0.2, still reads as a transcode."""
        return cls.TRANSCODE if text == "encode" else cls(text)


class Codec(StrEnum):
    H264 = "h264"
    """H.264 / AVC: plays everywhere."""
    HEVC = "hevc"
    """H.265 / HEVC: half the bits of H.264 at 4K."""
    AV1 = "av1"
    """AV1: fewer bits again; libsvtav1 in software, av1_nvenc on Ada and newer GPUs."""
    HEVC10 = "hevc10"
    """H.265 Main10: 10-bit 4:2:0 for HDR and grading; hevc_nvenc (p010) or libx265."""
    PRORES = "prores"
    """Apple ProRes 422 HQ in a .mov: 10-bit 4:2:2, intra-only, the editorial master; prores_ks
    in software (NVENC has no ProRes)."""

    @property
    def container(self) -> str:
        """The segments' and the deliverable's file extension."""
        return "mov" if self is Codec.PRORES else "mp4"

    @property
    def stream_name(self) -> str:
        """What ffprobe calls the video stream this codec makes."""
        return {Codec.HEVC10: "hevc"}.get(self, str(self))

    @property
    def ten_bit(self) -> bool:
        return self in (Codec.HEVC10, Codec.PRORES)


class EncoderChoice(StrEnum):
    AUTO = "auto"
    """NVENC where the worker's probe found a working one, else the software encoder."""
    NVENC = "nvenc"
    """NVENC only: a worker without one fails the segment and says so."""
    SOFTWARE = "software"
    """libx264 / libx265 / libsvtav1 even on a GPU host."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameRange:
    """Frames first..last (inclusive) every `step`, as Blender numbers them."""

    first: int
    last: int
    step: int = 1

    @property
    def frames(self) -> tuple[int, ...]:
        return tuple(range(self.first, self.last + 1, self.step))

    @property
    def count(self) -> int:
        return len(range(self.first, self.last + 1, self.step))

    def position(self, frame: int) -> int:
        """Where `frame` is in the range, from 0."""
        return (frame - self.first) // self.step

    def __str__(self) -> str:
        text = f"{self.first}-{self.last}"
        return text if self.step == 1 else f"{text}:{self.step}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    width: int
    height: int

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rung:
    """One rendition of a `--ladder` (farm.media.ladder): its size and its capped bitrate."""

    width: int
    height: int
    bitrate_kbps: int

    def __str__(self) -> str:
        return f"{self.width}x{self.height}@{self.bitrate_kbps}k"


class Each(StrEnum):
    """What `farm submit --each` makes one job of."""

    VIEW_LAYER = "view-layer"
    """Each view layer the scene renders: the job renders that layer alone."""
    CAMERA = "camera"
    """Each camera (`--each camera`, `--cameras A,B`): the job renders through that camera only,
    whatever the timeline's markers switch to."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    """The siblings one `farm submit --each` made of one scene (farm.core.siblings)."""

    id: str
    """Shared by the siblings: g-20261206-101500-3fa9c1."""
    each: Each
    member: str
    """The view layer or camera this sibling renders, as the scene names it."""
    label: str
    """`member` as a plain file name, distinct among the siblings: the video's name on fetch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A validated render job. Everything past the CLI trusts these values."""

    kind: JobKind = JobKind.RENDER
    source_name: str
    frames: FrameRange
    chunk_size: int
    resolution: Resolution
    fps: float
    samples: int
    codec: Codec
    # Encode jobs only (render jobs keep the defaults):
    encoder: EncoderChoice = EncoderChoice.AUTO
    quality: int | None = None
    """CRF (software) or CQ (NVENC); None: the encoder's default for the codec."""
    preset: str = "medium"
    """x264/x265 preset names; mapped to NVENC p1..p7 and SVT-AV1 presets."""
    target_quality: str = ""
    """`--target-quality ssim=0.98` (farm.media.quality.Target): each chunk's CRF/CQ is the
    highest whose short probes reach it; '': `quality` for every chunk."""
    score: str = "ssim"
    """`--score`: what each segment is scored with (farm.media.quality): `ssim` (SSIM and PSNR,
    the default), `vmaf` (VMAF too; a `vmaf=` target scores it either way) or `none` (no scoring
    pass: it costs 13% of a 1080p `medium` encode, more at faster presets)."""
    master: MasterInfo | None = None
    # Render jobs: what the .blend says, and which of the values above a flag set instead.
    scene: SceneInfo | None = None
    """The scene's own settings as read from the file at submit; None for jobs from before 0.2."""
    engine: str | None = None
    """--engine, or None: render with the scene's engine."""
    camera: str | None = None
    """--camera, or None: render through the scene's active camera."""
    overrides: tuple[str, ...] = ()
    """Settings a flag set (of frames, resolution, fps, samples, engine, camera); the renderer
    leaves every other setting as the scene has it."""
    assets_key: str | None = None
    """The job's asset manifest in the store (farm.blender.assets); None: the scene travels alone."""
    missing_assets: tuple[str, ...] = ()
    """Files the scene uses that were missing at submit (`--allow-missing`)."""
    trusted_scripts: bool = False
    """`--trusted-scripts`: Python stored in the .blend runs (autoexec on). Off by default: a
    .blend is untrusted input."""
    after: tuple[str, ...] = ()
    """`--after` / `--after-any`: the jobs this one waits for (farm.core.depends); the job is
    `waiting`, nothing of it sent, until they are done (or, with `after_any`, ended)."""
    after_any: bool = False
    """`--after-any`: run once every parent has ended, however it ended."""
    preview: int = 0
    """`--preview N`: N frames spread over the range (farm.core.preview) render first, at the
    farm's top priority, each a chunk of its own; 0: no preview."""
    hold: bool = False
    """`--hold`: the job stops `held` once its preview frames are done; `farm resume` renders the
    rest. Only with a preview."""
    view_layer: str | None = None
    """`--each view-layer`: render this view layer alone; None: every layer the scene renders."""
    group: Group | None = None
    """`--each`: the siblings this job is one of; None for a job submitted alone."""
    check_frames: bool = False
    """`--check-frames`: each segment's encode flags frames that are black or one flat colour
    (farm.media.framecheck), for `farm retry --frames` to fix."""
    tiles: int = 0
    """`--tiles N`: a still rendered as N tiles (farm.core.tiles). `frames` is then the tile
    slots 0..N-1, one chunk each, and `tile_frame` the Blender frame every tile renders; 0: not
    tiled."""
    tile_frame: int = 0
    """The still's frame as Blender numbers it (`--frames 9`), with `tiles`."""
    ladder: tuple[Rung, ...] = ()
    """`--ladder`: encode jobs make these renditions, largest first, from one decode of each
    segment (farm.media.ladder); the first is `resolution`. Empty: one output."""
    package: str = ""
    """`--package`: hls, dash or both, made from the ladder's renditions (farm.media.package)."""
    container: str = ""
    """`--container`: the deliverable's container (mp4, mov or mkv); '': the codec's own
    (Codec.container). The segments are always the codec's own."""

    @property
    def deliverable(self) -> str:
        """The deliverable's container and file extension: `output.mkv`, `output.mp4`."""
        return self.container or self.codec.container

    @property
    def rate(self) -> Fraction:
        """The exact frame rate: the scene's (24000/1001 for 23.976) unless --fps set one."""
        if self.scene is not None and "fps" not in self.overrides:
            return self.scene.rate
        return fps_fraction(self.fps)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["overrides"] = list(self.overrides)
        data["missing_assets"] = list(self.missing_assets)
        data["after"] = list(self.after)
        data["scene"] = self.scene.to_json() if self.scene else None
        data["kind"] = str(self.kind)
        data["codec"] = str(self.codec)
        data["encoder"] = str(self.encoder)
        data["ladder"] = [asdict(r) for r in self.ladder]
        if self.group is not None:
            data["group"]["each"] = str(self.group.each)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobSpec:
        return cls(
            kind=JobKind.parse(data["kind"]),
            source_name=data["source_name"],
            frames=FrameRange(**data["frames"]),
            chunk_size=int(data["chunk_size"]),
            resolution=Resolution(**data["resolution"]),
            fps=float(data["fps"]),
            samples=int(data["samples"]),
            codec=Codec(data["codec"]),
            encoder=EncoderChoice(data.get("encoder", "auto")),
            quality=None if data.get("quality") is None else int(data["quality"]),
            preset=str(data.get("preset", "medium")),
            target_quality=str(data.get("target_quality") or ""),
            score=str(data.get("score") or "ssim"),
            master=MasterInfo.from_json(data["master"]) if data.get("master") else None,
            scene=SceneInfo.from_json(data["scene"]) if data.get("scene") else None,
            engine=data.get("engine"),
            camera=data.get("camera"),
            overrides=tuple(data.get("overrides", ())),
            assets_key=data.get("assets_key"),
            missing_assets=tuple(data.get("missing_assets", ())),
            trusted_scripts=bool(data.get("trusted_scripts", False)),
            after=tuple(str(j) for j in data.get("after", ())),
            after_any=bool(data.get("after_any", False)),
            preview=int(data.get("preview", 0)),
            hold=bool(data.get("hold", False)),
            view_layer=data.get("view_layer"),
            group=_group(data.get("group")),
            check_frames=bool(data.get("check_frames", False)),
            tiles=int(data.get("tiles", 0)),
            tile_frame=int(data.get("tile_frame", 0)),
            ladder=tuple(_rung(r) for r in data.get("ladder", ())),
            package=str(data.get("package", "")),
            container=str(data.get("container") or ""),
        )


def _rung(data: dict[str, Any]) -> Rung:
    return Rung(width=int(data["width"]), height=int(data["height"]),
                bitrate_kbps=int(data["bitrate_kbps"]))  # fmt: skip


def _group(data: dict[str, Any] | None) -> Group | None:
    if not data:
        return None
    return Group(id=str(data["id"]), each=Each(data["each"]), member=str(data["member"]),
                 label=str(data["label"]))  # fmt: skip


BLENDER_MAX_FRAME = 1_048_574
"""MAXFRAME in Blender's DNA_scene_types.h: the last frame a scene can be set to."""


def parse_frames(text: str) -> FrameRange:
    """Parse `1-240`, `1-240:2` or `7` into a FrameRange."""
    match = _RANGE.match(text)
    if not match:
        raise SpecError(
            f"frame range {text!r} is not understood: write FIRST-LAST or FIRST-LAST:STEP, "
            "e.g. 1-240 or 1-240:2"
        )
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    step = int(match.group(3)) if match.group(3) is not None else 1
    if first < 0:
        raise SpecError(f"frame range {text!r} starts below 0: Blender frames start at 0 or more")
    if last < first:
        raise SpecError(f"frame range {text!r} ends before it starts: write {last}-{first}?")
    if step < 1:
        raise SpecError(f"frame range {text!r} has step {step}: the step must be 1 or more")
    frames = FrameRange(first=first, last=last, step=step)
    if frames.count > MAX_FRAMES:
        raise SpecError(f"frame range {text!r} has {frames.count} frames; at most {MAX_FRAMES}")
    if frames.first + (frames.count - 1) * step > BLENDER_MAX_FRAME:
        # Blender would clamp every frame past it to it: one image rendered again and again.
        raise SpecError(f"frame range {text!r} goes past frame {BLENDER_MAX_FRAME}, Blender's last")
    return frames


def parse_resolution(text: str) -> Resolution:
    """Parse `1920x1080`; both sides even (video encoders need it), at most 8K UHD."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match:
        raise SpecError(
            f"resolution {text!r} is not understood: write WIDTHxHEIGHT, e.g. 1920x1080"
        )
    width, height = int(match.group(1)), int(match.group(2))
    if width < 16 or height < 16:
        raise SpecError(f"resolution {text!r} is too small: at least 16x16")
    if width > MAX_WIDTH or height > MAX_HEIGHT:
        raise SpecError(f"resolution {text!r} is larger than {MAX_WIDTH}x{MAX_HEIGHT} (8K UHD)")
    if width % 2 or height % 2:
        raise SpecError(
            f"resolution {text!r} has an odd side: H.264/HEVC need even width and height, "
            f"e.g. {width + width % 2}x{height + height % 2}"
        )
    return Resolution(width=width, height=height)


def check_scene_path(path: Path) -> None:
    """A scene must be an existing, readable .blend file that starts with Blender's magic."""
    if not path.exists():
        raise SpecError(f"{path}: no such file; check the path and submit again")
    if not path.is_file():
        raise SpecError(f"{path}: is a directory, not a .blend file")
    if path.suffix.lower() != ".blend":
        raise SpecError(f"{path}: not a .blend file; render jobs take a Blender scene (.blend)")
    with path.open("rb") as fh:
        head = fh.read(7)
    # Compressed .blend files (gzip since 2.8, zstd since 3.0) hide the magic; let those through.
    if head != b"BLENDER" and head[:2] != b"\x1f\x8b" and head[:4] != b"\x28\xb5\x2f\xfd":
        raise SpecError(f"{path}: does not look like a Blender file (no BLENDER header)")


ENGINES = ("CYCLES", "BLENDER_EEVEE", "BLENDER_EEVEE_NEXT", "BLENDER_WORKBENCH")
_ENGINE_ALIASES = {"cycles": "CYCLES", "eevee": "BLENDER_EEVEE", "workbench": "BLENDER_WORKBENCH"}
_DEFAULT_SAMPLES = {"CYCLES": CYCLES_DEFAULT_SAMPLES, "BLENDER_EEVEE": 64, "BLENDER_EEVEE_NEXT": 64}
RENDER_SETTINGS = ("frames", "resolution", "fps", "samples", "engine", "camera")
"""The settings a render flag may set; every other one is the scene's."""


def parse_engine(text: str) -> str:
    name = _ENGINE_ALIASES.get(text.strip().lower(), text.strip().upper())
    if name not in ENGINES:
        raise SpecError(
            f"--engine {text!r}: choose cycles, eevee, workbench (or {', '.join(ENGINES)})"
        )
    return name


def scene_resolution(scene: SceneInfo) -> tuple[Resolution, str | None]:
    """The size Blender renders (resolution x percentage), rounded down to even sides for the
    video encoders; the second value says so when it rounded."""
    width, height = scene.render_size
    even = Resolution(width=width - width % 2, height=height - height % 2)
    if even.width < 16 or even.height < 16 or even.width > MAX_WIDTH or even.height > MAX_HEIGHT:
        raise SpecError(
            f"the scene renders at {width}x{height}: outside 16x16..{MAX_WIDTH}x{MAX_HEIGHT}; "
            "pass --resolution WIDTHxHEIGHT"
        )
    if (even.width, even.height) == (width, height):
        return even, None
    return even, f"the scene renders at {width}x{height}; the video needs even sides: {even}"


def _scene_frames(scene: SceneInfo) -> FrameRange:
    text = f"{scene.frame_start}-{scene.frame_end}:{scene.frame_step}"
    try:
        return parse_frames(text)
    except SpecError as exc:
        raise SpecError(f"the scene's frame range: {exc}; pass --frames FIRST-LAST") from None


def build_render_spec(
    *,
    source_name: str,
    frames: str | None,
    chunk_size: int | str,
    resolution: str | None,
    fps: float | None,
    samples: int | None,
    codec: str,
    engine: str | None = None,
    camera: str | None = None,
    scene: SceneInfo | None = None,
) -> JobSpec:
    """Validate CLI values over the scene's own settings into a render JobSpec, or raise SpecError
    naming the bad value. A None flag takes the scene's value (without a scene: the farm's old
    defaults, 1-120 at 1920x1080, 24 fps, 64 samples). `chunk_size` "auto" becomes AUTO_CHUNK."""
    text = str(chunk_size).strip().lower()
    if text == "auto":
        chunk_size = AUTO_CHUNK
    elif not text.lstrip("-").isdigit():
        raise SpecError(f"--chunk-size {chunk_size!r}: write a number of frames, or auto")
    elif int(text) < 1:
        raise SpecError(f"--chunk-size {text}: a chunk holds at least one frame (or write auto)")
    else:
        chunk_size = int(text)
    given = {"frames": frames, "resolution": resolution, "fps": fps, "samples": samples}
    given |= {"engine": engine, "camera": camera}
    overrides = tuple(name for name in RENDER_SETTINGS if given[name] is not None)
    if fps is not None and not 1 <= fps <= 240:
        raise SpecError(f"--fps {fps}: choose a frame rate between 1 and 240")
    if samples is not None and not 1 <= samples <= 65536:
        raise SpecError(f"--samples {samples}: choose between 1 and 65536 samples")
    try:
        parsed_codec = Codec(codec)
    except ValueError:
        choices = ", ".join(c.value for c in Codec)
        raise SpecError(f"--codec {codec!r}: choose one of {choices}") from None
    parsed_engine = parse_engine(engine) if engine is not None else None
    if camera is not None and not camera.strip():
        raise SpecError("--camera '': name a camera object of the scene")
    if scene is not None and camera is not None and scene.cameras and camera not in scene.cameras:
        raise SpecError(
            f"--camera {camera!r}: the scene has no such camera; it has {', '.join(scene.cameras)}"
        )
    if scene is not None and camera is None and scene.camera is None:
        # Blender renders nothing without a camera: say so now, not after three attempts.
        raise SpecError(
            "the scene has no active camera; set one in Blender (Scene > Camera) or pass --camera"
        )
    if scene is None:
        parsed_frames = parse_frames(frames or "1-120")
        size = parse_resolution(resolution or "1920x1080")
        rate, count = fps or 24.0, samples or 64
    else:
        parsed_frames = parse_frames(frames) if frames is not None else _scene_frames(scene)
        size = parse_resolution(resolution) if resolution else scene_resolution(scene)[0]
        rate = fps if fps is not None else float(scene.rate)
        if not 1 <= rate <= 240:
            raise SpecError(f"the scene runs at {rate:g} fps; pass --fps between 1 and 240")
        effective_engine = parsed_engine or scene.engine
        count = samples or (
            scene.samples
            if scene.samples is not None and effective_engine == scene.engine
            else _DEFAULT_SAMPLES.get(effective_engine, 1)
        )
    return JobSpec(
        source_name=source_name,
        frames=parsed_frames,
        chunk_size=chunk_size,
        resolution=size,
        fps=rate,
        samples=count,
        codec=parsed_codec,
        scene=scene,
        engine=parsed_engine,
        camera=camera,
        overrides=overrides,
    )


def provenance(spec: JobSpec) -> dict[str, dict[str, Any]]:
    """Each render setting's value and where it came from ("scene" or "flag"), for `farm status`
    and `submit --json`. Jobs without a scene record only flags and the farm's defaults."""
    if spec.kind is not JobKind.RENDER:
        return {}
    scene = spec.scene
    values: dict[str, Any] = {
        "frames": str(spec.tile_frame) if spec.tiles else str(spec.frames),
        "resolution": str(spec.resolution),
        "fps": str(spec.rate) if scene is not None else spec.fps,
        "samples": spec.samples,
        "engine": spec.engine or (scene.engine if scene else None),
        "camera": spec.camera or (scene.camera if scene else None),
    }
    origin = "scene" if scene is not None else "default"
    shown = {
        name: {"value": value, "from": "flag" if name in spec.overrides else origin}
        for name, value in values.items()
    }
    if scene is not None:
        for name, value in (
            ("denoising", scene.denoising),
            ("view_layers", list(scene.view_layers)),
            ("output", f"{scene.file_format} {scene.color_mode} {scene.color_depth}-bit"),
            ("blender_version", scene.blender_version),
        ):
            shown[name] = {"value": value, "from": "scene"}
    if spec.tiles:
        shown["tiles"] = {"value": spec.tiles, "from": "flag"}
    if spec.view_layer is not None:
        shown["view_layer"] = {"value": spec.view_layer, "from": "flag"}
    shown["scripts"] = {
        "value": "run (trusted)" if spec.trusted_scripts else "not run",
        "from": "flag" if spec.trusted_scripts else "default",
    }
    return shown
