"""A run's figures three ways: rich tables in the terminal, a JSON file, a PNG chart."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from . import check, infinity
from .peers import PEERS
from .cpu import API, CLIENT, NATIVE_MODEL, SERVER
from .measured import refused_of
from .server_counters import GRAPH_BATCH

SYSTEM_ORDER = ("triton-grpc", "triton-http", "triton-front", "triton-api", "triton-api-uncoalesced", "triton-api-grpc",
                "triton-api-refused",
                "api-floor", "doc", "doc-batched", *infinity.ENGINES)
COLORS = {"triton-grpc": "#76b900", "triton-http": "#2a7ab0", "triton-front": "#5dade2", "triton-api": "#1abc9c", "doc": "#c0392b", "doc-batched": "#e67e22",
          "infinity": "#8e44ad", "infinity-onnx": "#d35fb7", "floor": "#555555"}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _waste(run: dict) -> str:
    w = (run.get("padding_waste") or {}).get("waste")
    return "-" if w is None else f"{100 * w:.0f}%"


ROLE_SHORT = {"tokenizer": "first"}  # documents written before the first step's role had its name
CHECK_LABELS = {"triton": "Triton", "triton-api": "API /v1/embeddings", "triton-api-uncoalesced": "API, no coalescing",
                "triton-api-grpc": "API, inferences over gRPC", "triton-front": "Triton HTTP via the API's front",
                **{k: label for k, (label, _) in PEERS.items()},
                **{k: e.label for k, e in infinity.ENGINES.items()}}


SYSTEM_RANK = {s: i for i, s in enumerate(SYSTEM_ORDER)}
COMPARED_COLORS = ("#009e9e", "#b8860b", "#4b0082", "#7f8c8d")
COMPARED_SEP = "/"  # a compared repository's systems (bench --compare): triton/int8, triton-grpc/int8, ...


def compared_system(system: str, tag: str) -> str:
    """A compared repository's name for one of its systems: (triton-grpc, int8) -> triton-grpc/int8."""
    return f"{system}{COMPARED_SEP}{tag}"


def split_system(system: str) -> tuple[str, str]:
    """(the system, the compared repository's tag or ''): triton-grpc/int8 -> (triton-grpc, int8)."""
    base, _, tag = system.partition(COMPARED_SEP)
    return base, tag


def label_of(system: str) -> str:
    base, tag = split_system(system)
    return CHECK_LABELS.get(base, base) + (f" {tag}" if tag else "")


def _rank(system: str) -> tuple[int, str]:
    """The measured repository's systems in SYSTEM_ORDER, each compared repository's right after its own."""
    base, tag = split_system(system)
    return SYSTEM_RANK.get(base, 99), tag


def _color(document: dict, system: str) -> str | None:
    base, tag = split_system(system)
    if not tag:
        return COLORS.get(system)
    tags = list(document.get("compared") or {})
    return COMPARED_COLORS[tags.index(tag) % len(COMPARED_COLORS)] if tag in tags else None


def _step_roles(document: dict) -> list[str]:
    """The served steps of the runs' repositories (first, model, post, statistics), from the Triton runs'
    statistics: each role any of them has, in the order they first appear."""
    roles: dict[str, None] = {}
    for r in document["runs"]:
        roles.update((k, None) for k in r.get("steps") or {} if k != "ensemble")
    return list(roles)


def _sorted_runs(runs: list[dict]) -> list[dict]:
    return sorted(runs, key=lambda r: (_rank(r["system"]), r.get("texts_per_request", 1), r["concurrency"]))


def _texts_column(runs: list[dict]) -> bool:
    """Whether any request held more than one text (bench --stand-in --texts-per-request), so a table says which."""
    return any(r.get("texts_per_request", 1) != 1 for r in runs)


def workload_table(document: dict, workload: str) -> Table:
    info = document["workloads"][workload]
    tokens = info.get("tokens")  # none in an images workload
    table = Table(
        title=f"{workload}: {info['description']}" + (f" (tokens p50 {tokens['p50']:g}, max {tokens['max']})" if tokens
                                                      else ""),
        title_justify="left",
    )
    roles = _step_roles(document)
    per_step = "/".join(ROLE_SHORT.get(r, r) for r in roles)
    runs = [r for r in document["runs"] if r["workload"] == workload]
    texts = _texts_column(runs)
    for col in ("system", *(("texts",) if texts else ()), "conc", "p50 ms", "p95 ms", "p99 ms", "max ms", "req/s",
                "errors", "stalls", "batch", f"queued ms {per_step}", f"compute ms {per_step}", "padding"):
        table.add_column(col, justify="left" if col == "system" else "right", no_wrap=col == "system")
    for r in _sorted_runs(runs):
        lat = r["latency_ms"]
        steps = r.get("steps")
        if steps:
            batch = f"{model_batch(r):.1f}"
            # a compared repository of another layout has steps the first one lacks, and the other way round
            queue = "/".join(f"{steps[k]['queue_ms']:.2f}" if k in steps else "-" for k in roles)
            compute = "/".join(f"{steps[k]['compute_ms']:.2f}" if k in steps else "-" for k in roles)
        else:
            server = r.get("server") or {}
            batch = f"{server['avg_batch']:.1f}" if server.get("avg_batch") else "-"
            queue = compute = "-"
        errors = f"[red]{r['errors']}{refused_of(r)}[/]" if r["errors"] else "0"
        stalls = f"[red]{r['stalls']}[/]" if r.get("stalls") else "0"
        table.add_row(r["label"], *((str(r.get("texts_per_request", 1)),) if texts else ()), str(r["concurrency"]),
                      _ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"]), _ms(lat["max"]),
                      f"{r['throughput_rps']:.1f}", errors, stalls, batch, queue, compute, _waste(r))
    f = document.get("floor", {}).get(workload)
    if f:
        lat = f["batch1_latency_ms"]
        table.add_row("floor, batch 1", "1", _ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"]), _ms(lat["max"]),
                      f"{1000 / lat['mean']:.1f}" if lat["mean"] else "-", "0", "-", "1", "-", "-", "0%", style="dim")
        for order in ("arrival", "sorted", "regrouped"):
            t = f.get(order)
            if not t:  # regrouped: measured on mixed lengths only (rows of one length: the arrival order)
                continue
            table.add_row(f"floor, best batch ({order}, {t['layout']})", "-", "-", "-", "-", "-", f"{t['rps']:.1f}", "0", "-",
                          str(t["best_batch"]), "-", "-", f"{100 * t['padding_waste']:.0f}%", style="dim")
    return table


def breakdown_table(document: dict) -> Table | None:
    rows = [r for r in document["runs"] if r.get("breakdown") and r["concurrency"] == 1]
    if not rows:
        return None
    table = Table(title="Where Triton's time goes at concurrency 1 (mean ms per request)", title_justify="left")
    for col in ("system", "workload", "client", "in server", "steps queued", "steps computing", "ensemble hops", "outside server"):
        table.add_column(col, justify="left" if col in ("system", "workload") else "right")
    for r in _sorted_runs(rows):
        b = r["breakdown"]
        table.add_row(r["label"], r["workload"], _ms(b["client_mean_ms"]), _ms(b["server_ms"]), _ms(b["steps_queue_ms"]),
                      _ms(b["steps_compute_ms"]), _ms(b["ensemble_hops_ms"]), _ms(b["outside_server_ms"]))
    return table


def floor_best(document: dict, run: dict) -> dict | None:
    """The floor's best batch a run is held to: the measured repository's only (a compared one has its own graph);
    on mixed lengths the length-sorted one, as the model step regroups rows by length."""
    if split_system(run["system"])[1]:
        return None
    order = "sorted" if run["workload"] == "mixed" else "arrival"
    return (document.get("floor", {}).get(run["workload"]) or {}).get(order)


def client_inclusive_floor(document: dict, run: dict) -> dict | None:
    """The best any server could do on these cores with this load generator: every core busy with the floor's
    CPU per row at its best batch plus the client's CPU per request measured in the run."""
    best, cpu = floor_best(document, run), run.get("cpu") or {}
    client = (cpu.get("ms_per_request") or {}).get("client")
    if not best or not best.get("cpu_ms_per_row") or client is None:
        return None
    per_request = best["cpu_ms_per_row"] + client
    return {"floor_cpu_ms": best["cpu_ms_per_row"], "client_cpu_ms": client, "cpu_ms": round(per_request, 3),
            "rps": round(1e3 * cpu["cores"] / per_request, 2)}


def cpu_table(document: dict) -> Table | None:
    """CPU per request by process, beside what the floor's best batch costs: the gap, itemised; and the
    client-inclusive floor, the rate these cores allow with this client."""
    rows = [r for r in document["runs"] if r.get("cpu", {}).get("ms_per_request")]
    if not rows:
        return None
    roles = _step_roles(document)
    table = Table(title="CPU per request (ms, every process of the local server, and the load generator)", title_justify="left")
    native = any(NATIVE_MODEL in r["cpu"]["ms_per_request"] for r in rows)
    for col in ("system", "workload", "conc", "tritonserver", *((NATIVE_MODEL,) if native else ()),
                *(f"{r} stub" for r in roles), "client", "total", "floor",
                "floor at its batch", "floor + client", "limit req/s", "of limit", "idle"):
        table.add_column(col, justify="left" if col in ("system", "workload") else "right")
    for r in _sorted_runs(rows):
        c = r["cpu"]
        per = c["ms_per_request"]
        names = [(r.get("steps") or {}).get(k, {}).get("name") for k in roles]  # a compared repository's own
        best = floor_best(document, r)
        # The floor's own CPU per row at its best batch (measured; before it was measured: cores / rate).
        floor_ms = (best.get("cpu_ms_per_row") or 1e3 * c["cores"] / best["rps"]) if best and best.get("rps") else None
        # The same floor at the batch the model step averaged: what is left above it is per-call overhead,
        # what lies between it and the best batch is batch formation.
        at = floor_rate_at(best.get("by_batch") or {}, model_batch(r)) if best else None
        limit = client_inclusive_floor(document, r)
        table.add_row(r["label"], r["workload"], str(r["concurrency"]), _ms(per.get("tritonserver")),
                      *((_ms(per.get(NATIVE_MODEL)),) if native else ()), *(_ms(per.get(n)) for n in names), _ms(per.get("client")), _ms(c["total_ms_per_request"]),
                      _ms(floor_ms), f"{1e3 * c['cores'] / at:.2f}" if at else "-",
                      _ms(limit["cpu_ms"]) if limit else "-", f"{limit['rps']:.0f}" if limit else "-",
                      f"{r['throughput_rps'] / limit['rps']:.2f}" if limit else "-", f"{c['idle_pct']:.0f}%")
    return table


def model_batch(run: dict) -> float | None:
    """Rows per graph run in a Triton run: the fused step's own count where it ran (it runs every request
    waiting at once, whatever Triton handed it together), else the model step's batch as Triton reports it."""
    graph = (run.get("served") or {}).get(GRAPH_BATCH)
    return graph if graph else (run.get("steps") or {}).get("model", {}).get("avg_batch")


def floor_rate_at(by_batch: dict[str, float], batch: float | None) -> float | None:
    """The floor's rate at a batch size it did not measure: linear in log2(batch) between the two it measured
    around it (at either end, the nearest)."""
    points = sorted((int(b), rps) for b, rps in by_batch.items() if rps)
    if not points or not batch:
        return None
    if batch <= points[0][0] or batch >= points[-1][0]:
        return points[0][1] if batch <= points[0][0] else points[-1][1]
    for (b0, r0), (b1, r1) in zip(points, points[1:]):
        if b0 <= batch <= b1:
            t = (math.log2(batch) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
            return r0 + t * (r1 - r0)
    return None


def served_table(document: dict) -> Table | None:
    """What the served steps counted on Triton's metrics port, per measurement (serving/metrics.py)."""
    rows = [r for r in document["runs"] if r.get("served")]
    if not rows:
        return None
    shaped = [k for k in ("tritonize_windows_total", "tritonize_entities_total") if any(k in r["served"] for r in rows)]
    table = Table(title="What the served steps counted (tritonize_* metrics, deltas per measurement)", title_justify="left")
    for col in ("system", "workload", "conc", "texts", "tokens", "padding", "truncated", "unknown tokens",
                "rejected", *(k.removeprefix("tritonize_").removesuffix("_total") for k in shaped)):
        table.add_column(col, justify="left" if col in ("system", "workload") else "right")
    for r in _sorted_runs(rows):
        c = r["served"]
        count = lambda key: f"{c.get(key, 0):.0f}"  # noqa: E731
        rejected = sum(v for k, v in c.items() if k.startswith("tritonize_inputs_rejected_total"))
        waste = c.get("padding_waste")
        rate = c.get("unknown_token_rate")
        table.add_row(r["label"], r["workload"], str(r["concurrency"]), count("tritonize_texts_total"),
                      count("tritonize_tokens_total"), "-" if waste is None else f"{100 * waste:.0f}%",
                      count("tritonize_texts_truncated_total"),
                      "-" if rate is None else f"{100 * rate:.2f}%", f"{rejected:.0f}", *(count(k) for k in shaped))
    return table


def image_split_table(document: dict) -> Table | None:
    """The images workload in this process, one thread: the first step's work per image against the graph's."""
    split = document.get("image_split")
    if not split:
        return None
    table = Table(title="images, in process, one image at a time on one thread (ms per image)", title_justify="left")
    for col in ("work", "images", "p50", "p95", "p99", "mean"):
        table.add_column(col, justify="left" if col == "work" else "right")
    for key, label in (("first_ms", "first step: decode, preprocess"), ("model_ms", "model step: the graph")):
        lat = split[key]
        table.add_row(label, str(lat["requests"]), _ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"]), _ms(lat["mean"]))
    return table


def targets_table(document: dict) -> Table | None:
    targets = document.get("targets") or []
    if not targets:
        return None
    title = "Targets (the HTTP API, model step a stand-in)" if document.get("stand_in") else "Targets (Triton gRPC)"
    table = Table(title=title, title_justify="left")
    for col in ("target", "workload", "conc", "measured", "limit", "rule", ""):
        table.add_column(col, justify="right" if col in ("conc", "measured", "limit") else "left")
    for t in targets:
        mark = "[green]pass[/]" if t["passed"] else "[red]fail[/]"
        table.add_row(t["name"], t["workload"], str(t["concurrency"]), f"{t['value']:.2f}", f"{t['limit']:.2f}", t["rule"], mark)
    return table


TABLE_WIDTH = 150  # wide enough for every column, also when the output is a file


def print_tables(document: dict, console: Console) -> None:
    if console.width < TABLE_WIDTH:
        console = Console(file=console.file, width=TABLE_WIDTH, highlight=False, force_terminal=console.is_terminal)
    for workload in document["workloads"]:
        console.print(workload_table(document, workload))
    for system, by_workload in (document.get("checks") or {}).items():
        for workload, c in by_workload.items():
            mark = "[green]agree[/]" if c["passed"] else f"[red]disagree: {c['first_mismatch']}[/]"
            console.print(f"answers, {workload}: {label_of(system)} and the floor {mark} on {c['agree']}/{c['rows']} rows "
                          f"({check.describe(c)})")
    for system, reason in (document.get("skipped") or {}).items():
        console.print(f"[yellow]{label_of(system)}: skipped: {reason}[/]")
    # A stand-in run's CPU is the host's around a model that costs nothing: the floor and the targets are not for it.
    tables = ([breakdown_table(document), served_table(document), *host_cpu_tables(document), targets_table(document)]
              if document.get("stand_in")
              else [breakdown_table(document), cpu_table(document), served_table(document), image_split_table(document),
                    targets_table(document)])
    for table in tables:
        if table is not None:
            console.print(table)
    console.print(f"[dim]{document['meta']['note']}[/]")


def _processes(rows: list[dict]) -> dict[str, str]:
    """The server-side processes the rows measured, in one order (tritonserver, the steps' stubs in the ensemble's
    order, the API), each with its column's name (a stub by its step's role)."""
    seen = list(dict.fromkeys(k for r in rows for k in r["host_cpu"]["us_per_row"] if k != CLIENT))
    roles = {s["name"]: role for r in rows for role, s in (r.get("steps") or {}).items()}
    steps = list(roles)
    ordered = sorted(seen, key=lambda k: (k != SERVER, k == API, steps.index(k) if k in steps else len(steps), seen.index(k)))
    return {k: "API" if k == API else roles.get(k, k) for k in ordered}


def host_cpu_tables(document: dict) -> list[Table]:
    """bench --stand-in: CPU per request and per row by process with the model step a stand-in, the empty
    ensemble beside it, and the host cores one H100 needs at each."""
    order = list(document["workloads"])
    rows = [r for r in document["runs"] + document.get("empty", []) + document.get("api_floor", []) if r.get("host_cpu")]
    rows.sort(key=lambda r: (_rank(r["system"]), order.index(r["workload"]), r["texts_per_request"], r["concurrency"]))
    if not rows:
        return []
    meta = document["stand_in"]
    processes = _processes(rows)
    shape = ("system", "workload", "texts", "conc")
    tables = []
    for unit in ("request", "row"):
        table = Table(title=f"Host CPU around the model (stand-in graph), µs per {unit} by process; the model step: "
                            "Triton's execution time of it", title_justify="left")
        for col in (*shape, "rows/s", *processes.values(), "server", "model step", "client"):
            table.add_column(col, justify="left" if col in ("system", "workload") else "right")
        for r in rows:
            h, n = r["host_cpu"], r["texts_per_request"]
            us = h[f"us_per_{unit}"]
            model = h["model_us_per_row"] * (n if unit == "request" else 1) if h["model_us_per_row"] is not None else None
            table.add_row(r["label"], r["workload"], str(n), str(r["concurrency"]), f"{r['throughput_rps'] * n:.0f}",
                          *(f"{us[k]:.1f}" if k in us else "-" for k in processes), f"{h[f'server_us_per_{unit}']:.1f}",
                          "-" if model is None else f"{model:.1f}", f"{us[CLIENT]:.1f}")
        tables.append(table)
    cores = Table(title=f"Host cores one H100 needs: server CPU per row x the H100's rows/s (batch {meta['h100_batch']}, "
                        "measured once on an H100; a request's rows at the rate of its longest row's bucket)",
                  title_justify="left")
    for col in (*shape, "H100 rows/s", *processes.values(), "total"):
        cores.add_column(col, justify="left" if col in ("system", "workload") else "right")
    for r in rows:
        h = r["host_cpu"]
        cores.add_row(r["label"], r["workload"], str(r["texts_per_request"]), str(r["concurrency"]),
                      f"{h['h100_rows_per_s']:,}",
                      *(f"{h['cores_by_process'][k]:.1f}" if k in h["cores_by_process"] else "-" for k in processes),
                      f"[bold]{h['cores_per_h100']:.1f}[/]")
    return [*tables, cores]


def write_json(document: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def write_chart(document: dict, path: Path) -> Path:
    """p50 and p99 latency (top) and throughput (bottom) against concurrency, one column per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(document["workloads"])
    fewest = min((r.get("texts_per_request", 1) for r in document["runs"]), default=1)  # one request size a chart
    fig, axes = plt.subplots(2, len(workloads), figsize=(5.2 * len(workloads), 8), squeeze=False)
    for col, w in enumerate(workloads):
        lat_ax, thr_ax = axes[0][col], axes[1][col]
        runs = [r for r in document["runs"] if r["workload"] == w and r.get("texts_per_request", 1) == fewest]
        for system in sorted({r["system"] for r in runs}, key=_rank):
            rs = sorted((r for r in runs if r["system"] == system), key=lambda r: r["concurrency"])
            xs = [r["concurrency"] for r in rs]
            color, label = _color(document, system), rs[0]["label"]
            lat_ax.plot(xs, [r["latency_ms"]["p50"] for r in rs], "o-", color=color, label=f"{label} p50")
            lat_ax.plot(xs, [r["latency_ms"]["p99"] for r in rs], "x:", color=color, alpha=0.7, label=f"{label} p99")
            thr_ax.plot(xs, [r["throughput_rps"] for r in rs], "o-", color=color, label=label)
        f = document.get("floor", {}).get(w)
        if f:
            lat_ax.plot([1], [f["batch1_latency_ms"]["p50"]], "s", color=COLORS["floor"], label="floor batch-1 p50")
            thr_ax.axhline(f["arrival"]["rps"], color=COLORS["floor"], linestyle="--", label="floor best batch (arrival)")
            if w == "mixed":
                thr_ax.axhline(f["sorted"]["rps"], color=COLORS["floor"], linestyle=":", label="floor best batch (sorted)")
        ticks = sorted({r["concurrency"] for r in runs}) or [1]
        for ax, ylabel in ((lat_ax, "latency (ms)"), (thr_ax, "throughput (req/s)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
            ax.set_xlabel("concurrency")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
        lat_ax.set_yscale("log")
        lat_ax.set_title(f"{w}: {document['workloads'][w]['description']}", fontsize=9)
        thr_ax.set_ylim(bottom=0)
        lat_ax.legend(fontsize=6)
        thr_ax.legend(fontsize=6)
    meta = document["meta"]
    others = [label_of(s) for s in sorted({r["system"] for r in document["runs"]}, key=_rank)
              if split_system(s)[0] not in SYSTEM_ORDER[:2]]
    others += ["the in-process floor"] if document.get("floor") else []
    tags = list(document.get("compared") or {})
    fig.suptitle(f"{meta['model']}: Triton" + (f" (and {', '.join(tags)})" if tags else "") + "".join(f" vs {o}" for o in others) + " "
                 f"({meta['machine']['cpus']} CPUs, load generator on the same machine)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
