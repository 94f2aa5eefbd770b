"""One settings object for every farm command and worker: CLI flags over FARM_* env over the file.

`farm up` writes the file; FARM_CONFIG names another one. Nothing reads the environment at import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from farm.errors import ConfigError

ENV_PREFIX = "FARM_"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    redis_url: str = ""
    """redis://:PASSWORD@HOST:PORT/0 — broker, result backend and ledger."""
    s3_endpoint: str = ""
    """Empty for AWS S3; http://127.0.0.1:PORT for the local SeaweedFS."""
    s3_region: str = "us-east-1"
    s3_bucket: str = "farm"
    s3_access_key: str = ""
    """Empty: the default AWS credential chain (instance role)."""
    s3_secret_key: str = ""
    flower_url: str = ""
    flower_user: str = ""
    flower_password: str = ""
    lease_s: float = 30.0
    """A chunk whose lease is not renewed for this long is taken back by the reconciler."""
    reconcile_interval_s: float = 5.0
    max_attempts: int = 3
    """Failures a chunk may spend before the job fails; interruptions do not count."""
    max_lost_leases: int = 6
    """Times a chunk's worker may vanish mid-chunk (lease expired) before the job fails."""
    spot_interruption_per_h: float = 0.05
    """Expected spot reclaims per instance-hour (0.05: 5%/h); `--chunk-size auto` sizes for it."""
    render_memory_limit_mb: int = 0
    """Address-space cap for CPU Blender renders (0: none), so a runaway scene fails alone."""
    imds_url: str = "http://169.254.169.254"
    """The instance metadata service the spot watcher polls (IMDSv2)."""
    scratch_dir: str = ""
    """Where workers keep scenes and frames while they work; empty: the system temp dir."""
    blender: str = "blender"
    ffmpeg: str = "ffmpeg"
    ffprobe: str = "ffprobe"
    data_dir: str = ""
    """The local farm's data directory (`farm up --data`)."""

    @property
    def lease_renew_s(self) -> float:
        """Renew three times per lease so one missed beat never loses the chunk."""
        return max(self.lease_s / 3.0, 0.5)

    @property
    def recovery_bound_s(self) -> float:
        """Worst case from a worker's death to its chunk being queued again."""
        return self.lease_s + self.reconcile_interval_s

    def require_farm(self) -> Settings:
        if not self.redis_url:
            raise ConfigError(
                "no farm configured: run `farm up` for a local farm, or set FARM_REDIS_URL and "
                "FARM_S3_* to point at a remote one"
            )
        return self

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_config_path(env: Mapping[str, str]) -> Path:
    if env.get("FARM_CONFIG"):
        return Path(env["FARM_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "farm" / "config.json"


def _coerce(name: str, raw: object) -> object:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind == "float":
            return float(raw)  # type: ignore[arg-type]
        if kind == "int":
            return int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ConfigError(f"setting {name} = {raw!r} is not a number") from None
    return str(raw)


def load_settings(
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    config_path: Path | None = None,
) -> Settings:
    """Defaults, then the config file, then FARM_* variables, then explicit overrides."""
    env = os.environ if env is None else env
    path = config_path or default_config_path(env)
    names = {f.name for f in fields(Settings)}
    values: dict[str, object] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read farm config ({exc}); fix or delete it") from exc
        values.update({k: _coerce(k, v) for k, v in data.items() if k in names})
    for name in names:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = _coerce(name, raw)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value)
    return replace(Settings(), **values)  # type: ignore[arg-type]


def save_settings(settings: Settings, path: Path) -> None:
    """Write the config file readable by its owner only: it holds the farm's passwords."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings.to_json(), indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
