"""The outputs dashboard's panels of what the models answer, written from the registered tasks' statistics
(`tasks.statistics()`): a heatmap of each histogram's buckets, and a time series of each counter. The dashboard's
other sections (drift, canary and shadow) stay as the file holds them. `make docs` writes the file; a unit test
fails while it differs from the registry.
"""

from __future__ import annotations

import json

from ..serving.statistics import Statistic

OUTPUTS_DASHBOARD = "monitoring/grafana/dashboards/tritonize-outputs.json"
DISTRIBUTIONS = "Distributions of what the models answer"  # the row of the histograms' heatmaps
ANSWERS = "Answers"  # the row of the counters
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH, HEIGHT, FULL = 12, 8, 24  # a panel's grid size; two a line
HEATMAP_OPTIONS = {
    "calculate": False, "cellGap": 1,
    "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5, "fill": "dark-orange",
              "reverse": False, "steps": 64},
    "yAxis": {"axisPlacement": "left", "reverse": False}, "rowsFrame": {"layout": "le"},
    "cellValues": {"unit": "short"},
    "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False}, "legend": {"show": True},
    "exemplars": {"color": "rgba(255,0,255,0.7)"}, "filterValues": {"le": 1e-09},
}
SERIES_OPTIONS = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                  "tooltip": {"mode": "multi", "sort": "desc"}}


def _rate(name: str, by: str) -> str:
    return f'sum by ({by}) (rate({name}{{model=~"$model"}}[$__rate_interval]))'


def _target(expr: str, legend: str, **more) -> dict:
    return {"refId": "A", "datasource": DATASOURCE, "expr": expr, "legendFormat": legend, **more}


def heatmap(s: Statistic) -> dict:
    bucket = f"{s.name}_bucket"
    return {
        "type": "heatmap", "title": s.title,
        "description": f"{s.help} Rows per bucket over time ({bucket}); the bounds were chosen from the baseline "
                       "sample at generation.",
        "datasource": DATASOURCE, "gridPos": {"h": HEIGHT, "w": WIDTH}, "maxDataPoints": 120,
        "fieldConfig": {"defaults": {"custom": {"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                                                "scaleDistribution": {"type": "linear"}}}, "overrides": []},
        "options": HEATMAP_OPTIONS,
        "targets": [_target(f'sum by (le) (increase({bucket}{{model=~"$model"}}[$__rate_interval]))', "{{le}}",
                            format="heatmap", range=True)],
    }


def counter(s: Statistic) -> dict:
    """Per second by its label; as a share of what was counted beside it, where it counts what the histogram
    `share_of` leaves out (a question with no answer has no answer score)."""
    if s.share_of:
        counted = _rate(s.name, "model")
        expr = f"{counted} / ({_rate(s.share_of + '_count', 'model')} + {counted})"
        unit, more, legend = "percentunit", {"max": 1}, "{{model}}"
        described = f"{s.help} As a share of all answered: these, and those counted in {s.share_of}_count."
    else:
        by = f"model, {s.label}" if s.label else "model"
        expr, unit, more = _rate(s.name, by), "reqps", {}
        legend = f"{{{{model}}}} {{{{{s.label}}}}}" if s.label else "{{model}}"
        described = f"{s.help} Per second."
    return {
        "type": "timeseries", "title": s.title, "description": described, "datasource": DATASOURCE,
        "gridPos": {"h": HEIGHT, "w": WIDTH},
        "fieldConfig": {"defaults": {"unit": unit, "min": 0, "custom": {"fillOpacity": 10, "showPoints": "never",
                                                                        "lineWidth": 1}, **more}, "overrides": []},
        "options": SERIES_OPTIONS, "targets": [_target(expr, legend, range=True)],
    }


def _sections(panels: list[dict]) -> list[tuple[dict, list[dict]]]:
    """The dashboard's rows, each with the panels under it."""
    sections: list[tuple[dict, list[dict]]] = []
    for panel in panels:
        if panel["type"] == "row":
            sections.append((panel, []))
        else:
            sections[-1][1].append(panel)
    return sections


def _laid_out(sections: list[tuple[dict, list[dict]]]) -> list[dict]:
    """Each row across the grid, its panels after it left to right, ids in order."""
    out, y = [], 0
    for row, panels in sections:
        out.append({**row, "gridPos": {"h": 1, "w": FULL, "x": 0, "y": y}})
        y, x, tallest = y + 1, 0, 0
        for panel in panels:
            w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if x + w > FULL:
                y, x, tallest = y + tallest, 0, 0
            out.append({**panel, "gridPos": {"h": h, "w": w, "x": x, "y": y}})
            x, tallest = x + w, max(tallest, h)
        y += tallest
    return [{"id": i, **{k: v for k, v in p.items() if k != "id"}} for i, p in enumerate(out, 1)]


def outputs_dashboard(dashboard: dict, statistics: dict[str, Statistic]) -> dict:
    """The dashboard with its histograms' and counters' panels those of `statistics`."""
    made = {DISTRIBUTIONS: [heatmap(s) for s in statistics.values() if s.histogram],
            ANSWERS: [counter(s) for s in statistics.values() if not s.histogram]}
    sections = [(row, made.get(row["title"], panels)) for row, panels in _sections(dashboard["panels"])]
    missing = set(made) - {row["title"] for row, _ in sections}
    if missing:
        raise ValueError(f"the dashboard has no row {', '.join(sorted(missing))}")
    return {**dashboard, "panels": _laid_out(sections)}


def written(text: str) -> str:
    """The file's text with its statistics' panels the registry's."""
    from .. import tasks

    return json.dumps(outputs_dashboard(json.loads(text), tasks.statistics()), indent=2) + "\n"
