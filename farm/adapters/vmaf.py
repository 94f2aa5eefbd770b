"""The ffmpeg that scores VMAF (Settings.vmaf_ffmpeg): found, and whether it has libvmaf tried
once. Debian's ffmpeg has no libvmaf; imageio-ffmpeg's static build (a dependency) has it, with
libvmaf's built-in vmaf_v0.6.1 model, so no model file travels."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from farm.adapters import proc
from farm.core.errors import PermanentError

log = logging.getLogger(__name__)

IMAGEIO = "imageio-ffmpeg"
"""The setting that means imageio-ffmpeg's own binary (`imageio_ffmpeg.get_ffmpeg_exe()`)."""
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class VmafFfmpeg:
    """An ffmpeg for VMAF: its path ('' when there is none) and why it cannot score ('' when
    it can)."""

    binary: str = ""
    fault: str = ""


def vmaf_binary(setting: str) -> str:
    """The ffmpeg `setting` names: imageio-ffmpeg's for IMAGEIO (its IMAGEIO_FFMPEG_EXE, where
    set, first), any other value as given, '' for VMAF off. RuntimeError when imageio-ffmpeg has
    no binary here."""
    if setting != IMAGEIO:
        return setting
    try:
        import imageio_ffmpeg  # only where VMAF is asked: it looks for its binary on import
    except ImportError as exc:
        raise RuntimeError("imageio-ffmpeg is not installed") from exc
    return str(imageio_ffmpeg.get_ffmpeg_exe())


@functools.cache
def find_vmaf(setting: str) -> VmafFfmpeg:
    """The VMAF ffmpeg named by `setting`, tried once (`-hide_banner -filters` must list
    libvmaf): a farm's worker at start and its submit ask this."""
    if not setting:
        return VmafFfmpeg(fault="VMAF is off here (FARM_VMAF_FFMPEG=off)")
    try:
        binary = vmaf_binary(setting)
        listed = proc.capture([binary, "-hide_banner", "-filters"], PROBE_TIMEOUT_S)
    except (RuntimeError, OSError, PermanentError, proc.Timeout) as exc:
        return VmafFfmpeg(fault=f"{setting}: {exc}")
    if listed.returncode != 0:
        tail = (listed.stderr.strip() or f"exit {listed.returncode}").splitlines()[-1]
        return VmafFfmpeg(binary=binary, fault=f"{binary} -filters failed: {tail}")
    if not any(line.split()[1:2] == ["libvmaf"] for line in listed.stdout.splitlines()):
        return VmafFfmpeg(binary=binary, fault=f"{binary} has no libvmaf filter")
    return VmafFfmpeg(binary=binary)
