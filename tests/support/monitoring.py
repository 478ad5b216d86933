"""The dashboards and Prometheus as the monitoring tests read them: each panel's PromQL and the metric names it
reads, queries as Grafana sends them, answered or not, and `deploy.py` run as a user runs it."""


from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

from support import REPO_ROOT as ROOT
from tritonize.runtime import monitoring as mon

DASHBOARD = ROOT / "monitoring" / "grafana" / "dashboards" / "tritonize.json"
OUTPUTS_DASHBOARD = DASHBOARD.with_name("tritonize-outputs.json")  # what the models answer, drift, canary
DASHBOARDS = (DASHBOARD, OUTPUTS_DASHBOARD)
RATE_INTERVAL = "1m"  # what Grafana's $__rate_interval becomes in these checks

# PromQL words that look like names but are not metrics.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


# --------------------------------------------------------------------------- helpers


def dashboard(path=DASHBOARD) -> dict:
    return json.loads(path.read_text())


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


def recorded_names() -> set[str]:
    """The series the committed rules record (the drift records): a dashboard may read them beside the scraped."""
    rules = yaml.safe_load((ROOT / mon.COMPOSE_RULES).read_text())
    return {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}


def as_grafana_sends(dash: dict, expr: str) -> str:
    """The query Grafana sends with every model chosen (the variable's allValue) and the rate interval."""
    model = next(v for v in dash["templating"]["list"] if v["name"] == "model")
    sent = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$model", model["allValue"])
    assert "$" not in sent, f"a dashboard variable these checks do not know: {expr}"
    return sent


def unanswered(prometheus: str, dash: dict, served: set[str], wait_s: float = 10.0) -> dict[str, str]:
    """Every query of `dash` through Prometheus, after traffic: {panel title: query} for those with no answer.

    Each metric a query names must be `served` (on a metrics page Prometheus scrapes) or recorded by the rules,
    and stored; an answer must be per model, but for a heatmap's buckets (summed by `le` over the models
    chosen)."""
    names_url = f"{prometheus}/api/v1/label/__name__/values"
    with urllib.request.urlopen(names_url, timeout=5) as resp:  # noqa: S310 - loopback
        stored = set(json.loads(resp.read())["data"])
    known = served | recorded_names()
    empty = {}
    for p in panels(dash):
        for t in p["targets"]:
            names = metric_names(t["expr"])
            assert names and names <= known, f"{p['title']}: {names - known} neither served nor recorded"
            assert names <= stored, f"{p['title']}: {names - stored} not in Prometheus"
            deadline = time.monotonic() + wait_s
            while not (result := query(prometheus, as_grafana_sends(dash, t["expr"]))) and time.monotonic() < deadline:
                time.sleep(0.5)
            if not result:
                empty[p["title"]] = t["expr"]
            elif t.get("format") != "heatmap":
                models = {row["metric"].get("model") for row in result}
                assert models and None not in models, f"{p['title']}: not per model: {result}"
    return empty


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
