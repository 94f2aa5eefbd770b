"""What this worker's hardware can do: a Cycles GPU backend (OptiX, CUDA) and a working NVENC.

Both are found by trying, not by reading a model name: H100/H200/A100 have CUDA but no encoder.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass

from farm import proc
from farm.dispatch import Queue
from farm.errors import PermanentError

log = logging.getLogger(__name__)

_CYCLES_DEVICES = (
    "import _cycles, json\n"
    "found = {}\n"
    "for kind in ('OPTIX', 'CUDA'):\n"
    "    try:\n"
    "        found[kind] = [d[0] for d in _cycles.available_devices(kind) if d[1] == kind]\n"
    "    except Exception as exc:\n"
    "        found[kind] = []\n"
    "print('FARM_DEVICES ' + json.dumps(found))\n"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    gpus: tuple[str, ...] = ()
    """GPU names nvidia-smi lists."""
    cycles_device: str = "CPU"
    """OPTIX, CUDA or CPU: the best Cycles backend that found a device."""
    nvenc: bool = False
    """A one-frame test encode with h264_nvenc succeeded."""
    nvenc_error: str = ""

    def queues(self) -> list[str]:
        """Render and stitch always; encode where NVENC works, or where there is no GPU at all
        (a CPU host encodes in software; a GPU host without an encoder leaves encodes to others)."""
        queues = [str(Queue.RENDER), str(Queue.STITCH)]
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


def cycles_device(blender: str) -> str:
    argv = [blender, "--background", "--factory-startup", "--python-expr", _CYCLES_DEVICES]
    try:
        result = proc.capture(argv, 120)
    except PermanentError:
        raise
    for line in result.stdout.splitlines():
        if line.startswith("FARM_DEVICES "):
            found = json.loads(line.removeprefix("FARM_DEVICES "))
            for kind in ("OPTIX", "CUDA"):
                if found.get(kind):
                    return kind
    return "CPU"


def nvenc_works(ffmpeg: str) -> tuple[bool, str]:
    """Encode one black frame with h264_nvenc; the only test that tells an encoder is there."""
    argv = [
        ffmpeg,
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "error",
        "-f",
        "lavfi",
        "-i",
        "color=c=black:s=256x256:d=0.04",
        "-frames:v",
        "1",
        "-c:v",
        "h264_nvenc",
        "-f",
        "null",
        "-",
    ]
    result = proc.capture(argv, 60)
    if result.returncode == 0:
        return True, ""
    reason = (result.stderr.strip().splitlines() or ["h264_nvenc failed"])[-1]
    return False, reason


def probe(*, blender: str, ffmpeg: str) -> Capabilities:
    gpus = list_gpus()
    device = cycles_device(blender) if gpus else "CPU"
    nvenc, error = nvenc_works(ffmpeg) if gpus else (False, "no NVIDIA GPU")
    caps = Capabilities(gpus=gpus, cycles_device=device, nvenc=nvenc, nvenc_error=error)
    log.info("capabilities: %s", caps)
    return caps
