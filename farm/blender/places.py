"""The places a scene's files are never uploaded from, whatever the user allows: system folders,
a home's credentials, the farm's own data and config (farm.blender.assets asks for each file)."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from farm.adapters.settings import LOCAL_CONFIG, config_paths

PRIVATE_ROOTS = ("/proc", "/sys", "/dev", "/run", "/etc", "/boot")
"""System folders no texture lives in, some of which hold secrets (/proc/self/environ,
/run/secrets)..."""
MEDIA = "/run/media"
"""... but for where a desktop mounts a removable drive, which may well hold a project."""
PRIVATE_HOME = (
    ".ssh", ".aws", ".gnupg", ".netrc", ".docker", ".kube", ".azure", ".pgpass",
    ".git-credentials", ".vault-token", ".password-store", ".pki", ".npmrc", ".pypirc", ".s3cfg",
    ".boto", ".oci", ".terraform.d", ".cargo/credentials", ".cargo/credentials.toml",
    ".config/farm", ".config/gcloud", ".config/gh", ".config/hub", ".config/git/credentials",
    ".config/rclone", ".config/op", ".config/Bitwarden", ".config/doctl", ".config/helm",
    ".config/google-chrome", ".config/chromium", ".mozilla", ".thunderbird",
    ".local/share/keyrings", ".local/share/kwalletd", ".local/share/password-store",
)  # fmt: skip
"""The places in a home folder where credentials live: keys and tokens of clouds, clusters, code
hosts, registries and package indexes, password stores, keyrings and browser profiles."""


@dataclass(frozen=True, slots=True)
class Private:
    """The places a scene's files are never uploaded from, resolved once per trace."""

    credentials: tuple[Path, ...]
    configs: frozenset[Path]
    data_dirs: tuple[Path, ...] = ()

    @classmethod
    def of(
        cls,
        environ: Mapping[str, str] = os.environ,
        config: Path | None = None,
        data_dirs: Iterable[Path] = (),
    ) -> Private:
        """`data_dirs`: the farm's data folders the settings name (settings.data_dir), besides the
        defaults: ./.farm (`make demo`) and $XDG_DATA_HOME/farm (`farm up` without --data)."""
        home = Path(environ.get("HOME") or Path.home())
        homes = {home, _account_home()}
        configs = {*config_paths(environ), *([config] if config else [])}
        shared = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share") / "farm"
        return cls(
            credentials=tuple((h / place).resolve() for h in homes for place in PRIVATE_HOME),
            configs=frozenset(c.expanduser().resolve() for c in configs),
            data_dirs=tuple(
                d.resolve() for d in (*data_dirs, Path.cwd() / LOCAL_CONFIG.parent, shared)
            ),
        )

    def reason(self, path: Path) -> str:
        """Why `path` (a file a scene uses) is never uploaded, or "": a system folder, a home's
        credentials, the farm's own data or config; links are followed to what they name."""
        real = path.resolve()
        if any(real.is_relative_to(root) for root in PRIVATE_ROOTS) and not _mounted(real):
            return "a system folder"
        if any(real.is_relative_to(place) for place in self.credentials):
            return "where credentials are kept"
        if real in self.configs:
            return "the farm's config"
        return (
            "the farm's data folder" if any(real.is_relative_to(d) for d in self.data_dirs) else ""
        )


def _account_home() -> Path:
    """The account's own home, which $HOME may not be (a sudo, a script's HOME=/tmp/x)."""
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return Path.home()


def private(path: Path, environ: Mapping[str, str] = os.environ, config: Path | None = None) -> str:
    """`Private.reason` for one file (`config`: the one this command reads, when not the
    default)."""
    return Private.of(environ, config).reason(path)


def _mounted(real: Path) -> bool:
    """Under /run, where a desktop mounts drives and shares: a removable drive (/run/media/USER),
    a network share opened in the file manager (/run/user/UID/gvfs), a sandboxed app's files
    (/run/user/UID/doc)."""
    parts = real.parts
    return real.is_relative_to(MEDIA) or (
        parts[1:3] == ("run", "user") and len(parts) > 4 and parts[4] in ("gvfs", "doc")
    )
