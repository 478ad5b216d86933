"""What the HTTP API costs beside what it fronts, in a `bench --stand-in` run: the floor under it (an empty ASGI
endpoint on the same server stack, bench/asgi_floor.py), what a refused request costs it, and its targets.

The targets, with the model step a stand-in, single texts at SINGLE_C clients and requests of ROWS texts
at BATCH_C: the whole path's CPU per request through the API at most PATH_RATIO x the gRPC path's; the API process
alone at most API_US per single text and API_US_ROW per row; the host cores one H100 of single texts needs through
the API at most H100_CORES; a refused request (a body the API refuses) at most REFUSAL_SHARE of a served one's API
CPU. The absolute ones are this machine's figures: the floor's, measured in the same run, says what its server
stack alone costs here.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from . import cpu, load
from .asgi_floor import LABEL, FloorProcess
from .measured import record, say_run
from .targets import Target

FLOOR_SYSTEM, REFUSED_SYSTEM = "api-floor", "triton-api-refused"
FLOOR_KEY = "api_floor"  # the floor's runs in the run's document
FLOOR_LABEL, REFUSED_LABEL = "empty ASGI endpoint", "API, refused (422)"
SINGLE_C, BATCH_C, ROWS = 64, 8, 64
PATH_RATIO, API_US, API_US_ROW, H100_CORES, REFUSAL_SHARE = 1.5, 150.0, 10.0, 20.0, 0.05


class Refused(load._Http):
    """A body the API refuses (an empty text: 422, before any inference); anything but that status is an error."""

    def __init__(self, url: str, model: str, timeout_s: float, status: int = 422):
        super().__init__(timeout_s)
        self.url, self.status = url.rstrip("/") + "/embeddings", status
        self.body = json.dumps({"model": model, "input": ""}).encode()

    async def send(self, row) -> None:
        async with self.session.post(self.url, data=self.body, headers=load.JSON_HEADERS) as resp:
            await resp.read()
            if resp.status != self.status:
                raise RuntimeError(f"HTTP {resp.status}, not {self.status}")


def measure_refusals(bench, meter: cpu.CpuMeter | None) -> None:
    """Refused requests through the API the run measures, at its highest concurrency, on its first workload; the
    API's and the server's CPU per refusal, as a run of its own."""
    if not bench.api_url or meter is None:
        return
    o, wname = bench.o, next(iter(bench.workloads))
    c = max(o.concurrency)
    result = load.measure(lambda: Refused(bench.api_url, bench.name, o.timeout_s), bench.workloads[wname].rows, c,
                          o.bound(c), meter.start)
    bench.runs.append(record(REFUSED_SYSTEM, REFUSED_LABEL, wname, result,
                             {"cpu": meter.finish(result.completed, result.client_cpu_s, result.wall_s)}))
    bench.say(say_run(bench.runs[-1]))


def measure_floor(bench, dim: int) -> list[dict]:
    """The empty ASGI endpoint, every workload, request size and concurrency the run measured, with the same
    load generator; its process's CPU per request."""
    from ..runtime.machine import free_ports

    o, runs = bench.o, []
    (port,) = free_ports(1)
    bench.say(f"[bold]{FLOOR_LABEL}[/] (uvicorn as the API runs it, {dim} floats per text written by orjson): the "
              "server stack's own cost")
    process = FloorProcess(port, dim, Path(o.output) / ".run" / "asgi-floor.log")
    with process as url:
        meter = cpu.CpuMeter(None)
        meter.watch(LABEL, process.proc.pid)  # it leads its own process group
        for wname, w in bench.workloads.items():
            for n in o.texts_per_request:
                for c in o.concurrency:
                    result = load.measure(lambda: load.OpenAIEmbeddings(url + "/v1", bench.name, o.timeout_s, n),
                                          load.requests_of(w.rows, n), c, o.bound(c), meter.start)
                    used = meter.finish(result.completed, result.client_cpu_s, result.wall_s)
                    runs.append(record(FLOOR_SYSTEM, FLOOR_LABEL, wname, result, {"cpu": used}, n))
                    bench.say(say_run(runs[-1]))
    return runs


def _find(runs: list[dict], system: str, workload: str, texts: int, concurrency: int) -> dict | None:
    return next((r for r in runs if r["system"] == system and r["workload"] == workload
                 and r["texts_per_request"] == texts and r["concurrency"] == concurrency and r.get("host_cpu")), None)


def targets(document: dict) -> list[dict]:
    """The API's targets on each workload the run measured (skipped where their runs are missing)."""
    runs, found = document["runs"] + document.get(FLOOR_KEY, []), []
    for w in document["workloads"]:
        api, grpc = _find(runs, "triton-api", w, 1, SINGLE_C), _find(runs, "triton-grpc", w, 1, SINGLE_C)
        floor1, floor_rows = _find(runs, FLOOR_SYSTEM, w, 1, SINGLE_C), _find(runs, FLOOR_SYSTEM, w, ROWS, BATCH_C)
        if api and grpc:
            value = api["host_cpu"]["server_us_per_request"] / grpc["host_cpu"]["server_us_per_request"]
            found.append(Target("API path CPU vs gRPC path", w, SINGLE_C, round(value, 2), PATH_RATIO,
                                value <= PATH_RATIO, f"<= {PATH_RATIO:g} x gRPC's (server CPU per single text)"))
        if api:
            found.append(_at_most("API process CPU per text (µs)", w, SINGLE_C,
                                  api["host_cpu"]["us_per_request"].get(cpu.API), API_US, floor1, "us_per_request"))
            cores = api["host_cpu"]["cores_per_h100"]
            found.append(Target("host cores per H100, single texts via the API", w, SINGLE_C, cores, H100_CORES,
                                cores <= H100_CORES, f"<= {H100_CORES:g} cores"))
        rows = _find(runs, "triton-api", w, ROWS, BATCH_C)
        if rows:
            found.append(_at_most(f"API process CPU per row, {ROWS}-text requests (µs)", w, BATCH_C,
                                  rows["host_cpu"]["us_per_row"].get(cpu.API), API_US_ROW, floor_rows, "us_per_row"))
        refused = next((r for r in runs if r["system"] == REFUSED_SYSTEM and r["workload"] == w and r.get("host_cpu")),
                       None)
        served = _find(runs, "triton-api", w, 1, refused["concurrency"]) if refused else None
        if refused and served:
            value = refused["host_cpu"]["us_per_request"].get(cpu.API, 0) / served["host_cpu"]["us_per_request"][cpu.API]
            found.append(Target("API CPU of a refusal vs a served text", w, refused["concurrency"], round(value, 3),
                                REFUSAL_SHARE, value <= REFUSAL_SHARE,
                                f"<= {REFUSAL_SHARE:g} x the API's CPU per served single text"))
    return [asdict(t) for t in found if t is not None]


def _at_most(name: str, w: str, c: int, value: float | None, limit: float, floor: dict | None,
             unit: str) -> Target | None:
    if value is None:
        return None
    beside = f" (the empty ASGI endpoint: {floor['host_cpu'][unit].get(LABEL, 0):.1f})" if floor else ""
    return Target(name, w, c, value, limit, value <= limit, f"<= {limit:g} µs{beside}")
