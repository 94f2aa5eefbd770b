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
    assert not any("<script" in t.read_text() for t in TEMPLATES.glob("*.html"))


def test_the_policy_loads_nothing_but_the_farms_own_and_the_stores_video() -> None:
    policy = dict(
        part.split(" ", 1)
        for part in jobpage.content_security_policy("https://farm.s3.amazonaws.com").split("; ")
    )
    assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert policy["img-src"] == "'self'"
    assert policy["media-src"] == "'self' https://farm.s3.amazonaws.com"
    assert policy["script-src"].startswith("'unsafe-hashes' 'sha256-")
    assert "unsafe-inline" not in policy["script-src"]
