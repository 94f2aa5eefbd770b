"""The job pages' Content-Security-Policy allows the script the templates hold, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from farm.web import jobpage

TEMPLATES = Path(jobpage.__file__).parent / "templates"


def test_every_inline_handler_in_the_templates_is_one_the_policy_allows() -> None:
    handlers = {
        value
        for template in TEMPLATES.glob("*.html")
        for value in re.findall(r'\son\w+="([^"]*)"', template.read_text())
    }
    assert handlers == set(jobpage.INLINE_HANDLERS)
    # No inline script: only the farm's own player files, by their /static address.
    scripts = {
        s for t in TEMPLATES.glob("*.html") for s in re.findall(r"<script[^>]*>", t.read_text())
    }
    assert scripts == {'<script src="/static/hls.min.js">', '<script src="/static/player.js">'}
    static = Path(jobpage.__file__).parent / "static"
    assert all((static / s.split('"')[1].rsplit("/", 1)[1]).is_file() for s in scripts)


def test_the_policy_loads_nothing_but_the_farms_own_and_the_stores_video() -> None:
    policy = dict(
        part.split(" ", 1)
        for part in jobpage.content_security_policy("https://farm.s3.amazonaws.com").split("; ")
    )
    assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert policy["img-src"] == "'self'"
    # blob: is the Media Source hls.js feeds; it fetches the package from this origin alone.
    assert policy["media-src"] == "'self' blob: https://farm.s3.amazonaws.com"
    assert policy["connect-src"] == "'self'"
    assert policy["script-src"].startswith("'self' 'unsafe-hashes' 'sha256-")
    assert "unsafe-inline" not in policy["script-src"]
