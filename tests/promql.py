"""Metric names in PromQL expressions, for the tests that hold the dashboard and the KEDA
trigger to what the exporter really serves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "infra" / "grafana" / "farm-dashboard.json"


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names (inside {} or by/without lists) or range durations."""
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        following = expr[m.end() :].lstrip()[:1]
        if following == "(":
            continue  # a function or aggregation
        names.add(m.group(0))
    return names - {"and", "or", "unless", "bool", "offset"}
