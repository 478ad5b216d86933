"""The docs' lists of what the registry knows are written from it (tritonize/docs_tables.py, `make docs`)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT
from tritonize import docs_tables, serving, tasks
from tritonize.runtime import dashboards, monitoring


def test_the_docs_tables_are_the_registrys() -> None:
    assert docs_tables.stale(REPO_ROOT) == [], "run `make docs`"


def test_a_registered_task_and_its_routes_join_the_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The task outside tritonize (tests/plugins/tritonize_shout), registered: its row lists its ensemble with its
    own post step, a route of its, set in a copy of the route table, names it, and the statistic it declares gets
    a heatmap on the outputs dashboard and a drift rule."""
    shutil.copytree(REPO_ROOT / "tests" / "plugins" / "tritonize_shout", tmp_path / "tritonize_shout")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    try:
        tasks.register("tritonize_shout")
        row = docs_tables.task_table().splitlines()[-1]
        assert row.startswith("| `shout` | `TEXT` → first step (`tokenizer`) → model → post step (`shout`) → `shout` |")
        table = "| route | shape | served models |\n|---|---|---|\n| `POST /v1/shout` (ours) | `inputs` | ? |"
        assert docs_tables.with_route_tasks(table).splitlines()[-1] == "| `POST /v1/shout` (ours) | `inputs` | shout |"
        dashboard = json.loads(dashboards.written((REPO_ROOT / dashboards.OUTPUTS_DASHBOARD).read_text()))
        (heatmap,) = [p for p in dashboard["panels"] if p["title"] == "Shout: answer length"]
        assert heatmap["type"] == "heatmap" and "tritonize_output_shout_norm_bucket" in heatmap["targets"][0]["expr"]
        assert [p["id"] for p in dashboard["panels"]] == list(range(1, len(dashboard["panels"]) + 1))
        assert "tritonize_output_shout_norm" in monitoring.histograms()
        assert "statistic: tritonize_output_shout_norm\n" in monitoring.compose_rules()
    finally:
        for name in [m for m in sys.modules if m.startswith(("tritonize_shout", "tritonize.serving.shout"))]:
            del sys.modules[name]
