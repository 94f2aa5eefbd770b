"""What this worker can do: its Blender (version, engines, Cycles devices, denoisers), a Cycles
GPU backend (OptiX, CUDA), a working NVENC and an ffmpeg with libvmaf.

All are found by trying, not by reading a model name: H100/H200/A100 have CUDA but no encoder, and
NVML still reports an H.264/HEVC encoder capacity of 100 on an H200 (driver 580).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict, dataclass

import ffmpeg as ffmpeg_lib

from farm.adapters import proc
from farm.adapters.vmaf import find_vmaf
from farm.blender import command as blender_cmd
from farm.core.errors import PermanentError
from farm.core.pipeline import Queue
from farm.core.versions import parse_version

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    gpus: tuple[str, ...] = ()
    """GPU names nvidia-smi lists."""
    cycles_device: str = "CPU"
    """OPTIX, CUDA or CPU: the best Cycles backend that found a device."""
    nvenc: bool = False
    """A one-frame test encode with h264_nvenc succeeded."""
    nvenc_error: str = ""
    blender_version: str = ""
    """The Blender release that renders here, e.g. "4.5.4"; empty when the probe did not run."""
    blender_file_version: tuple[int, ...] = ()
    """Its file format version, e.g. (4, 5, 91): what decides which newer files it opens."""
    engines: tuple[str, ...] = ()
    """Render engines it has, under its own names (BLENDER_EEVEE_NEXT in 4.5)."""
    devices: tuple[str, ...] = ()
    """Cycles device kinds with a device here: CPU, CUDA, OPTIX, HIP, ONEAPI."""
    denoisers: tuple[str, ...] = ()
    """OPENIMAGEDENOISE where the build has it; OPTIX with an OptiX device."""
    blender_error: str = ""
    """Why the Blender probe failed; such a worker takes no render chunks."""
    vmaf: bool = False
    """Its VMAF ffmpeg (Settings.vmaf_ffmpeg) lists the libvmaf filter."""
    vmaf_error: str = ""
    """Why it cannot score VMAF; a chunk that asks for VMAF fails here, saying so."""

    def queues(self) -> list[str]:
        """Render (when Blender works) and stitch; encode where NVENC works, or where there is no
        GPU at all (a CPU host encodes in software; a GPU host without an encoder leaves encodes
        to others). The phase queues: the worker consumes every project's lanes of each too
        (farm.core.queues.consumed), and its capabilities decide which phases, not projects."""
        queues = (
            [str(Queue.STITCH)] if self.blender_error else [str(Queue.RENDER), str(Queue.STITCH)]
        )
        if self.nvenc or not self.gpus:
            queues.insert(1, str(Queue.ENCODE))
        return queues

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def list_gpus() -> tuple[str, ...]:
    if not shutil.which("nvidia-smi"):
        return ()
    result = proc.capture(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], 20)
    if result.returncode != 0:
        return ()
    return tuple(line.strip() for line in result.stdout.splitlines() if line.strip())


@dataclass(frozen=True, slots=True, kw_only=True)
class BlenderInfo:
    version: str = ""
    file_version: tuple[int, ...] = ()
    engines: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    denoisers: tuple[str, ...] = ()
    error: str = ""


def probe_blender(blender: str) -> BlenderInfo:
    """Run the render script's `--probe` in this worker's Blender (binary or bpy wheel)."""
    try:
        result = proc.capture(blender_cmd.probe_argv(blender=blender), 180)
    except PermanentError as exc:
        return BlenderInfo(error=str(exc))
    caps = blender_cmd.parse_caps(result.stdout)
    if result.returncode != 0 or caps is None:
        tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
        return BlenderInfo(
            error=f"Blender probe ({blender}) exited {result.returncode}: " + " | ".join(tail)
        )
    version = str(caps.get("version", ""))
    return BlenderInfo(
        version=version,
        file_version=tuple(int(v) for v in caps.get("file_version", ()))
        or parse_version(version or "0"),
        engines=tuple(caps.get("engines", ())),
        devices=tuple(sorted(caps.get("devices", {}))),
        denoisers=tuple(caps.get("denoisers", ())),
    )


def best_device(devices: tuple[str, ...], gpus: tuple[str, ...]) -> str:
    """OPTIX, then CUDA, where an NVIDIA GPU is listed and Cycles found it; else CPU."""
    for kind in ("OPTIX", "CUDA"):
        if gpus and kind in devices:
            return kind
    return "CPU"


def nvenc_works(ffmpeg: str) -> tuple[bool, str]:
    """Encode one black frame with h264_nvenc; the only test that tells an encoder is there."""
    one_frame = (
        ffmpeg_lib.input("color=c=black:s=256x256:d=0.04", f="lavfi")
        .output("-", f="null", vcodec="h264_nvenc", **{"frames:v": 1})
        .global_args("-hide_banner", "-nostdin", "-loglevel", "error")
    )
    result = proc.capture(one_frame.compile(cmd=ffmpeg), 60)
    if result.returncode == 0:
        return True, ""
    return False, encoder_reason(result.stderr, "h264_nvenc")


def encoder_reason(stderr: str, encoder: str) -> str:
    """Why an encoder would not open, in the encoder's own words: the lines it logs under its own
    name ("[h264_nvenc @ 0x...] OpenEncodeSessionEx failed: unsupported device (2)"). ffmpeg's
    last line only says that it failed ("Conversion failed!", or since 7.0 "Nothing was written
    into output file...")."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    tag = f"[{encoder} @ "
    own = [line.split("] ", 1)[-1] for line in lines if line.startswith(tag)]
    return "; ".join(dict.fromkeys(own)) or (lines[0] if lines else f"{encoder} failed")


def vmaf_works(vmaf_ffmpeg: str) -> tuple[bool, str]:
    """Whether the ffmpeg `vmaf_ffmpeg` names (Settings.vmaf_ffmpeg) has libvmaf, and why not:
    its `-hide_banner -filters`, run once (farm.adapters.vmaf)."""
    found = find_vmaf(vmaf_ffmpeg)
    return not found.fault, found.fault


def probe(*, blender: str, ffmpeg: str, vmaf_ffmpeg: str = "") -> Capabilities:
    gpus = list_gpus()
    info = probe_blender(blender)
    if info.error:
        log.error("this worker takes no render chunks: %s", info.error)
    nvenc, error = nvenc_works(ffmpeg) if gpus else (False, "no NVIDIA GPU")
    vmaf, vmaf_error = vmaf_works(vmaf_ffmpeg)
    caps = Capabilities(
        gpus=gpus,
        cycles_device=best_device(info.devices, gpus),
        nvenc=nvenc,
        nvenc_error=error,
        blender_version=info.version,
        blender_file_version=info.file_version,
        engines=info.engines,
        devices=info.devices,
        denoisers=info.denoisers,
        blender_error=info.error,
        vmaf=vmaf,
        vmaf_error=vmaf_error,
    )
    log.info("capabilities: %s", caps)
    return caps
