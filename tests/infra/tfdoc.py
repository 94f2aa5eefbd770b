"""Readers for the static deployment checks: parsed Terraform, tool lookup, repository paths."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import pytest

REPO = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO / "infra" / "terraform"
DOCKERFILE = REPO / "workers" / "Dockerfile"
COMPOSE_FILE = REPO / "docker-compose.yml"

# GPU families whose NVIDIA GPUs have an NVENC encoder (T4, A10G, L4, L40S, T4G).
NVENC_FAMILIES = frozenset({"g4dn", "g5", "g6", "g6e", "g5g"})
# GPU families without NVENC (V100, A100, H100, H200): fine for Cycles, never for encode pools.
RENDER_ONLY_FAMILIES = frozenset({"p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en"})


def load_tf(path: Path) -> dict[str, Any]:
    """Parse one .tf file into python-hcl2's dict form, string quotes stripped."""
    with path.open() as handle:
        try:
            from hcl2 import SerializationOptions
        except ImportError:  # python-hcl2 < 7 strips quotes on its own
            return dict(hcl2.load(handle))
        options = SerializationOptions(strip_string_quotes=True, with_comments=False)
        return dict(hcl2.load(handle, serialization_options=options))


def tf_files() -> list[Path]:
    return sorted(p for p in TERRAFORM_DIR.rglob("*.tf") if ".terraform" not in p.parts)


def parse_all() -> dict[Path, dict[str, Any]]:
    """Every .tf file under infra/terraform, parsed, keyed by path relative to it."""
    return {p.relative_to(TERRAFORM_DIR): load_tf(p) for p in tf_files()}


def blocks(
    tf: dict[Path, dict[str, Any]], kind: str, type_: str, *, under: str | None = None
) -> Iterator[tuple[Path, str, dict[str, Any]]]:
    """(file, name, body) of each `kind "type_" "name"` block (kind: resource or data)."""
    for path, doc in tf.items():
        if under is not None and not str(path).startswith(under):
            continue
        for entry in doc.get(kind, []):
            for name, body in entry.get(type_, {}).items():
                yield path, name, body


def one(body: dict[str, Any], key: str) -> dict[str, Any]:
    """The single nested block `key` of a block body."""
    nested = body[key]
    assert isinstance(nested, list) and len(nested) == 1, f"expected one {key} block"
    return dict(nested[0])


def variables(tf: dict[Path, dict[str, Any]], module_dir: str = "") -> dict[str, dict[str, Any]]:
    """Variable blocks declared directly in one module directory ("" is the root)."""
    found: dict[str, dict[str, Any]] = {}
    for path, doc in tf.items():
        if str(path.parent) != (module_dir or "."):
            continue
        for entry in doc.get("variable", []):
            found.update(entry)
    return found


def module_calls(tf: dict[Path, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Root module calls by name."""
    calls: dict[str, dict[str, Any]] = {}
    for path, doc in tf.items():
        if path.parent == Path("."):
            for entry in doc.get("module", []):
                calls.update(entry)
    return calls


PROVIDER_MIRRORS = (
    Path("/opt/tf-plugins"),
    Path.home() / ".terraform.d" / "plugins",
    Path.home() / ".local" / "share" / "terraform" / "plugins",
    Path("/usr/local/share/terraform/plugins"),
    Path("/usr/share/terraform/plugins"),
)
"""Where a machine keeps Terraform providers unpacked (`terraform providers mirror` layout)."""
LOOPBACK = "http://127.0.0.1:9"
"""Where an offline plan's AWS provider would send a call: nothing listens, nothing leaves."""


def offline_terraform(root: Path) -> tuple[str, dict[str, str]]:
    """Terraform and an environment that installs hashicorp/aws only from a local mirror
    ($FARM_TF_PROVIDERS, else the first of PROVIDER_MIRRORS holding it), never the registry,
    and reads no AWS credentials or instance metadata; its CLI config goes under `root`."""
    terraform = find_tool(
        "terraform", "FARM_TERRAFORM", "install Terraform 1.6 or later (developer.hashicorp.com)"
    )
    given = os.environ.get("FARM_TF_PROVIDERS", "")
    candidates = [Path(given)] if given else list(PROVIDER_MIRRORS)
    aws = Path("registry.terraform.io/hashicorp/aws")
    mirror = next((path for path in candidates if (path / aws).is_dir()), None)
    if mirror is None:
        pytest.fail(
            f"no local mirror of hashicorp/aws in {', '.join(map(str, candidates))}: run "
            "`terraform providers mirror DIR` in infra/terraform once (online), then set "
            "FARM_TF_PROVIDERS=DIR"
        )
    config = root / "offline.tfrc"
    config.write_text(
        f'provider_installation {{\n  filesystem_mirror {{ path = "{mirror}" }}\n}}\n'
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_"))},
        "TF_CLI_CONFIG_FILE": str(config),
        "CHECKPOINT_DISABLE": "1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(root / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(root / "no-aws-credentials"),
    }
    return terraform, env


def offline_aws_provider(region: str, services: tuple[str, ...]) -> dict[str, Any]:
    """An AWS provider block that plans without an account: made-up keys, no credential or
    account check, no metadata service, and each of `services` at LOOPBACK."""
    return {
        "region": region,
        "access_key": "offline",
        "secret_key": "offline",
        "skip_credentials_validation": True,
        "skip_requesting_account_id": True,
        "skip_metadata_api_check": True,
        "endpoints": [{service: LOOPBACK for service in services}],
    }


def find_tool(name: str, env_var: str, install_hint: str) -> str:
    """A tool from $env_var, .venv-tools/bin, this interpreter's bin, or PATH; fails if absent."""
    candidates = [
        os.environ.get(env_var, ""),
        str(REPO / ".venv-tools" / "bin" / name),
        str(Path(sys.executable).parent / name),
        shutil.which(name) or "",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(f"{name} not found ({env_var}, .venv-tools/bin, the venv, PATH): {install_hint}")
