"""ffprobe's command lines are built in farm.media.probe alone, purely, and checked by list equality."""

from __future__ import annotations

import ast
from pathlib import Path

from farm.media.probe import (
    DEFAULT_CA_FILE,
    FARM_FORMATS,
    format_argv,
    input_options,
    option_args,
)

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "farm" / "media" / "probe.py"


def ffprobe_argv_lines(source: str) -> list[int]:
    """Lines where a list starts with ffprobe (a name, a setting or the word): an argv built."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.List) or not node.elts:
            continue
        first = node.elts[0]
        if (
            (isinstance(first, ast.Name) and first.id == "ffprobe")
            or (isinstance(first, ast.Attribute) and first.attr == "ffprobe")
            or (isinstance(first, ast.Constant) and first.value == "ffprobe")
        ):
            found.append(node.lineno)
    return found


def test_a_presigned_url_is_probed_over_its_own_scheme_with_its_certificate_checked() -> None:
    """The one URL ffprobe reads: a deliverable the store assembled (workers.phases.s3join)."""
    url = "https://s3.example/m.mp4?X-Amz-Signature=s"
    assert format_argv("/opt/ffprobe", url, FARM_FORMATS) == [
        "/opt/ffprobe", "-v", "error",
        "-protocol_whitelist", "https,tls,tcp", "-format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2",
        "-show_format", "-show_streams", "-of", "json", url,
    ]  # fmt: skip
    assert option_args(input_options(url, "/farm/ca.pem")) == [
        "-reconnect", "1", "-reconnect_on_network_error", "1", "-reconnect_delay_max", "10",
        "-tls_verify", "1", "-ca_file", "/farm/ca.pem",
    ]  # fmt: skip
    assert option_args(input_options(url, ""))[-2:] == ["-ca_file", DEFAULT_CA_FILE]
    assert "http,tcp" in format_argv("ffprobe", "http://s3/m.mp4", FARM_FORMATS)


def test_the_finder_sees_an_argv_built_by_hand() -> None:
    """What a phase once did (workers.phases.transcode built its own probe of the master)."""
    by_hand = 'x = capture([ctx.settings.ffprobe, "-v", "error", "-show_format", url], 120)\n'
    assert ffprobe_argv_lines(by_hand) == [1]
    assert ffprobe_argv_lines("argv = [ffprobe, '-v', 'error', path]\n") == [1]
    assert ffprobe_argv_lines("x = probe_streams(ctx.settings.ffprobe, segment)\n") == []


def test_only_the_probe_module_builds_an_ffprobe_command_line() -> None:
    """farm.media.probe is the one place: a second argv would drift from it (the certificate
    check on presigned URLs, how a file name is quoted)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in ("farm", "workers")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != PROBE
        for line in ffprobe_argv_lines(path.read_text())
    ]
    assert offenders == []
    assert ffprobe_argv_lines(PROBE.read_text())  # the finder does find them where they are
