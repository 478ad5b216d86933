"""Helpers shared by several test modules."""


from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

from support import REPO_ROOT as ROOT
from tritonize.runtime import monitoring as mon

DASHBOARD = ROOT / "monitoring" / "grafana" / "dashboards" / "tritonize.json"

# PromQL words that look like names but are not metrics.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


# --------------------------------------------------------------------------- helpers


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dash: dict) -> list[dict]:
    return [p for p in dash["panels"] if p["type"] != "row"]


def exprs(dash: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [(p["title"], t["expr"]) for p in panels(dash) for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: not functions, label names, keywords or durations."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # range durations
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", e):
        if m.group().lower() in KEYWORDS or re.match(r"\s*\(", e[m.end():]):  # a function or an aggregation
            continue
        names.add(m.group())
    return names


def need(tool: str) -> str:
    """A binary of Debian's prometheus package; in CI (where `make system-deps` installs it) a failure."""
    found = shutil.which(tool)
    if found is None:
        message = f"no `{tool}` on PATH ({mon.INSTALL_HINT})"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the monitoring tests: {message}")
        pytest.skip(message)
    return found


def query(prometheus: str, promql: str) -> list[dict]:
    """An instant query through Prometheus's HTTP API: the result vector."""
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def deploy(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "deploy.py"), "local", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)
