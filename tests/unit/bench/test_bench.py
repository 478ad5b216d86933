"""The bench's parts without a server: the corpus and its token counts, the floor, the load generator's
batching and CPU meter, the counters' reading, the targets and the tune grid.
"""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from pathlib import Path

import pytest

from tritonize import chain
from tritonize.bench import corpus, floor, load, peer_server, server_counters, tune
from tritonize.errors import TritonizeError

# -- workloads -----------------------------------------------------------------


def test_shipped_corpus_is_varied() -> None:
    texts = corpus.read_corpus()
    words = [len(t.split()) for t in texts]
    assert len(texts) >= 300
    assert min(words) <= 3 and max(words) >= 150  # a few to a few hundred tokens
    assert sum(any(ord(c) > 127 for c in t) for t in texts) >= 20  # some non-ASCII
    assert len(set(texts)) > 0.9 * len(texts)


def test_fixed_length_texts_have_exact_token_counts(tiny_embedding_repo) -> None:
    chained = chain.in_process(tiny_embedding_repo.repository)
    w = corpus.build_workloads(["short", "long", "mixed"], chained.lengths, chained.max_length, corpus.read_corpus(), 16, 48, n_texts=50)
    for name, target in (("short", 16), ("long", 48)):
        assert len(w[name].rows) == 50 and len(set(w[name].rows)) == 50
        assert all(len(r) == 1 for r in w[name].rows)
        assert {len(chained.encoder.tokenizer.encode(r[0]).ids) for r in w[name].rows} == {target}
    assert w["mixed"].summary()["tokens"]["max"] <= chained.max_length  # truncated as the server truncates


def test_served_counters_are_read_once_they_stop_moving() -> None:
    """The steps publish their counts up to PUBLISH_S late: a read settles on the first value read twice running."""
    reads = iter([{"texts": 3.0}, {"texts": 7.0}, {"texts": 8.0}, {"texts": 8.0}, {"texts": 9.0}])
    assert server_counters.settled(lambda: next(reads)) == {"texts": 8.0}
    moving = iter(range(1000))
    started = time.monotonic()
    assert server_counters.settled(lambda: next(moving), limit_s=0.5) >= 2  # never still: the last read once the limit passed
    assert time.monotonic() - started < 2.0


def test_the_floor_at_a_batch_it_did_not_measure() -> None:
    """The CPU table's split of the gap: between the floor at the step's own batch and its best batch."""
    from tritonize.bench.report import floor_rate_at

    by_batch = {"1": 200.0, "4": 272.0, "16": 296.0, "64": 343.0}
    assert floor_rate_at(by_batch, 4) == 272.0
    assert floor_rate_at(by_batch, 8) == pytest.approx(284.0)  # halfway between 4 and 16 in log2
    assert floor_rate_at(by_batch, 0.5) == 200.0 and floor_rate_at(by_batch, 500) == 343.0
    assert floor_rate_at({}, 8) is None and floor_rate_at(by_batch, None) is None


def test_targets_over_the_peer_and_over_fp32_come_only_from_what_the_run_measured() -> None:
    from tritonize.bench.targets import evaluate

    def run(system: str, workload: str, rps: float) -> dict:
        return {"system": system, "workload": workload, "concurrency": 16, "throughput_rps": rps}

    doc = {"meta": {"precision": "fp32"}, "compared": {"int8": {"precision": "int8"}},
           "runs": [run("triton-grpc", "short", 300.0), run("infinity", "short", 150.0),
                    run("triton-grpc/int8", "short", 500.0), run("triton-grpc", "long", 30.0),
                    run("infinity", "long", 26.0), run("triton-grpc/int8", "long", 60.0)]}
    found = {(t["name"], t["workload"]): t for t in evaluate(doc)}
    assert found[("throughput vs infinity", "short")]["passed"]  # 300 >= 1.5 x 150
    assert not found[("throughput vs infinity", "long")]["passed"]  # 30 < 1.2 x 26
    assert found[("int8 vs fp32 throughput", "short")] | {"passed": None} == {
        "name": "int8 vs fp32 throughput", "workload": "short", "concurrency": 16, "value": 500.0, "limit": 600.0,
        "passed": None, "rule": ">= 2 x fp32 Triton (the measured repository)", "floor_reaches": None}
    assert not found[("int8 vs fp32 throughput", "short")]["passed"]
    assert ("int8 vs fp32 throughput", "long") not in found  # no int8 target on long texts
    assert ("throughput vs infinity-onnx", "short") not in found  # not measured, not judged
    doc["meta"]["precision"] = "fp16"
    assert not any(t["name"].startswith("int8 vs") for t in evaluate(doc))  # only over an fp32 repository


def test_targets_for_scaling_tails_and_the_client_inclusive_floor() -> None:
    """Concurrency 4 over 1, p99 over p50 at each concurrency, and throughput over the rate these cores allow
    with this client (the floor's CPU per row plus the client's per request, every core busy)."""
    from tritonize.bench.report import client_inclusive_floor
    from tritonize.bench.targets import evaluate

    def run(workload: str, c: int, rps: float, p50: float, p99: float, client_ms: float = 1.0) -> dict:
        return {"system": "triton-grpc", "workload": workload, "concurrency": c, "throughput_rps": rps,
                "latency_ms": {"p50": p50, "p99": p99}, "cpu": {"cores": 2, "ms_per_request": {"client": client_ms}}}

    floor = {"batch1_latency_ms": {"p50": 3.0, "p99": 10.0},
             "arrival": {"order": "arrival", "rps": 600.0, "cpu_ms_per_row": 3.0},
             "sorted": {"order": "sorted", "rps": 300.0, "cpu_ms_per_row": 6.0}}
    doc = {"meta": {"precision": "fp32"},
           "floor": {"short": floor, "mixed": {**floor, "scaling_ceiling": {"4": 1.23}}},
           "runs": [run("short", 1, 200.0, 4.0, 7.0), run("short", 4, 320.0, 12.0, 30.0),
                    run("short", 16, 460.0, 30.0, 95.0), run("mixed", 1, 150.0, 4.0, 16.0),
                    run("mixed", 4, 200.0, 15.0, 40.0), run("mixed", 16, 250.0, 50.0, 120.0, client_ms=2.0)]}
    found = {(t["name"], t["workload"], t["concurrency"]): t for t in evaluate(doc)}
    assert found[("concurrency 4 vs 1", "short", 4)]["passed"]  # 320 >= 1.5 x 200
    assert not found[("concurrency 4 vs 1", "mixed", 4)]["passed"]  # 200 < 1.5 x 150
    # Where the floor bounds the ratio, the target says so; the verdict stays the target's.
    assert found[("concurrency 4 vs 1", "mixed", 4)]["floor_reaches"] == 1.23
    assert "the floor's own: 1.23 x" in found[("concurrency 4 vs 1", "mixed", 4)]["rule"]
    assert found[("concurrency 4 vs 1", "short", 4)]["floor_reaches"] is None
    assert found[("p99 tail", "short", 1)]["passed"] and not found[("p99 tail", "short", 4)]["passed"]
    assert not found[("p99 tail", "short", 16)]["passed"]  # 95 > 3 x 30
    assert not found[("p99 vs floor", "mixed", 1)]["passed"]  # 16 > 1.5 x 10
    assert found[("p50 vs floor", "short", 1)]["limit"] == 4.5  # floor + 1.5 ms
    # 2 cores x 1000 / (3 ms floor + 1 ms client) = 500 req/s; 460 >= 0.9 x 500.
    assert client_inclusive_floor(doc, doc["runs"][2]) == {"floor_cpu_ms": 3.0, "client_cpu_ms": 1.0, "cpu_ms": 4.0,
                                                            "rps": 500.0}
    assert found[("throughput vs client-inclusive floor", "short", 16)]["passed"]
    assert found[("throughput vs client-inclusive floor", "mixed", 16)]["limit"] == 225.0  # 0.9 x 2000 / (6 + 2)
    assert not found[("throughput vs floor", "short", 16)]["passed"]  # 460 < 0.8 x 600


# -- the peer server, in process -----------------------------------------------


def test_naive_batching_takes_every_queued_request() -> None:
    """The doc's batching loop, fixed: the first request of a batch is kept."""
    seen: list[list[str]] = []

    def predict(texts):
        seen.append(list(texts))
        return [{"n": len(t)} for t in texts]

    async def scenario() -> list:
        q: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(5)]
        for i, f in enumerate(futures):
            q.put_nowait((f"text {i}", f))
        task = asyncio.create_task(peer_server.server_loop(q, predict, True, peer_server.Counters()))
        results = await asyncio.wait_for(asyncio.gather(*futures), 5)
        task.cancel()
        return results

    results = asyncio.run(scenario())
    assert seen == [[f"text {i}" for i in range(5)]]
    assert [r["n"] for r in results] == [6] * 5


def test_a_dead_model_loop_fails_every_request_at_once() -> None:
    from starlette.testclient import TestClient

    def predict(texts):
        if ("boom",) in texts:
            raise RuntimeError("model exploded")
        return [{"embedding": [1.0]} for _ in texts]

    with TestClient(peer_server.create_app(predict, batch=False)) as client:
        assert client.post("/", content="hello".encode()).json() == {"embedding": [1.0]}
        start = time.monotonic()
        first = client.post("/", content=b"boom")
        later = client.post("/", content="héllo".encode())
        assert time.monotonic() - start < 2.0  # visible at once, not a hang
        assert first.status_code == 503 and "model exploded" in first.json()["error"]
        assert later.status_code == 503 and "model loop died" in later.json()["error"]
        assert client.get("/health").status_code == 503


def test_a_measurement_never_collects_the_heap_it_started_with() -> None:
    """A full collector pass over a large heap would stop the generator and count as server latency: while a load
    runs, the heap it found is frozen, and the collector still frees what the run itself leaves in cycles."""

    class Cycle:
        pass

    seen: list[tuple[int, bool, bool]] = []

    class Probe(load.Sender):
        async def send(self, row) -> None:
            cycle = Cycle()
            cycle.me = cycle
            alive = weakref.ref(cycle)
            del cycle
            gc.collect()
            seen.append((gc.get_freeze_count(), gc.isenabled(), alive() is None))

    before = [object() for _ in range(1000)]
    result = load.measure(Probe, [("a",)], 2, load.Bound(requests=4))
    assert result.completed == 4 and len(seen) == 4
    assert all(frozen >= len(before) and enabled and freed for frozen, enabled, freed in seen)
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_run_counts_which_of_its_errors_were_refusals() -> None:
    """A server that is full (gRPC UNAVAILABLE, HTTP 429 or 503) refused the request; any other error failed it. A
    run says how many of its errors were each."""
    from tritonize.client import ServerError

    faults = [ServerError("Exceeds maximum queue size", "StatusCode.UNAVAILABLE"), RuntimeError("HTTP 429: busy"),
              RuntimeError("HTTP 503: draining"), ServerError("bad text", "StatusCode.INVALID_ARGUMENT"),
              RuntimeError("HTTP 422: bad body"), None]

    class Faulty(load.Sender):
        async def send(self, row) -> None:
            fault = faults[int(row[0])]
            if fault is not None:
                raise fault

    assert [load.is_refusal(f) for f in faults[:-1]] == [True, True, True, False, False]
    result = load.measure(Faulty, [(str(i),) for i in range(len(faults))], 1, load.Bound(requests=len(faults)))
    summary = result.summary()
    assert (summary["completed"], summary["errors"], summary["refused"]) == (1, 5, 3)


# -- the in-process floor ------------------------------------------------------


def test_floor_reports_latency_and_every_order(tiny_embedding_repo) -> None:
    f = floor.Floor(tiny_embedding_repo.repository)
    rows = [(t,) for t in corpus.read_corpus()[:64]]
    result = floor.measure(f, rows, requests=20, duration_s=None, fixed_length=False, batches=(1, 2, 8), ceilings=(4,))
    assert result["batch1_latency_ms"]["requests"] == 20
    assert result["batch1_latency_ms"]["p50"] > 0
    for order in ("arrival", "sorted", "regrouped"):
        assert result[order]["rps"] > 0 and set(result[order]["by_batch"]) == {"1", "2", "8"}
        assert set(result[order]["by_layout"]) == {f"{n}x{t}" for n, t in f.layouts()}
    # Sorting by length, or regrouping each batch by length as the model step does, can only reduce padding.
    for order in ("sorted", "regrouped"):
        assert result[order]["padding_waste_by_batch"]["8"] <= result["arrival"]["padding_waste_by_batch"]["8"]
    assert result["arrival"]["padding_waste_by_batch"]["1"] == 0
    ceiling = result["scaling_ceiling"]["4"]
    assert ceiling is not None and ceiling > 0
    # Rows of one length: no regrouped order, the ceiling read from arrival order.
    fixed = floor.measure(f, rows[:1] * 16, requests=8, duration_s=None, fixed_length=True, batches=(1, 2), ceilings=(4,))
    assert "regrouped" not in fixed and fixed["scaling_ceiling"]["4"] > 0


def test_the_batch_reported_is_the_graphs() -> None:
    """The local one step runs the requests waiting at once, whatever Triton handed it together: its own counters
    give the batch; without them (the container, a two-step server), Triton's statistics do."""
    from tritonize.bench.report import model_batch

    steps = {"model": {"avg_batch": 1.3}}
    assert model_batch({"steps": steps, "served": {"graph_batch": 7.5}}) == 7.5
    assert model_batch({"steps": steps, "served": {}}) == 1.3
    assert model_batch({"steps": steps}) == 1.3


def test_scaling_ceiling_counts_rows_in_flight() -> None:
    """A batch of b on s sessions has b x s requests in flight: only points with at most c of them bound concurrency c."""
    t = floor.Throughput("regrouped", by_layout={"1x2": {1: 300.0, 4: 500.0, 8: 900.0}, "2x1": {1: 400.0, 2: 450.0, 4: 800.0}})
    # Batch-1 mean 4 ms: one request at a time runs 250 rows/s.
    assert floor.scaling_ceiling(t, 4.0, 4) == 2.0  # 500 (1x2, batch 4), not 800 (2x1, batch 4: 8 in flight)
    assert floor.scaling_ceiling(t, 4.0, 1) == 1.2  # 300
    assert floor.scaling_ceiling(t, 0.0, 4) is None


def test_cpu_meter_charges_each_process_of_the_group(tmp_path) -> None:
    """A busy leader and a busy child in one process group, read from /proc like a local server; and a process of
    its own group watched beside it, like the HTTP API."""
    import os
    import signal
    import subprocess
    import sys

    from tritonize.bench.cpu import API, SERVER, CpuMeter

    busy = "import time\nend = time.time() + 3\nwhile time.time() < end: pass\n"
    child = tmp_path / "child.py"
    child.write_text(busy)
    leader = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.Popen([sys.executable, {str(child)!r}]); {busy!r} and exec({busy!r})"],
        start_new_session=True,
    )
    api = subprocess.Popen([sys.executable, str(child)], start_new_session=True)
    try:
        time.sleep(0.5)
        meter = CpuMeter(leader.pid, cores=2)
        meter.watch(API, api.pid)
        meter.start()
        time.sleep(1.0)
        result = meter.finish(completed=100, client_cpu_s=0.05, wall_s=1.0)
    finally:
        for group in (leader, api):
            os.killpg(group.pid, signal.SIGKILL)  # the child too
            group.wait()
    per = result["ms_per_request"]
    python = Path(sys.executable).name
    # Three busy processes on two cores: about 6.7 ms per request each over 100 requests.
    assert per[SERVER] > 2.0
    assert per[python] > 2.0  # the child, labelled by its executable
    assert per[API] > 2.0  # outside the server's group, watched by its own
    assert per["client"] == 0.5
    assert result["total_ms_per_request"] == pytest.approx(sum(per.values()), abs=0.01)
    assert result["completed"] == 100
    assert 1e3 * sum(result["cpu_s"].values()) / 100 == pytest.approx(result["total_ms_per_request"], abs=0.01)
    assert 0 <= result["idle_pct"] < 50


def test_tune_grid_takes_the_local_gather_window() -> None:
    assert tune.parse_grid(["gather-us=0,4000", "model_instances=1"]) == {"gather_us": [0, 4000], "model_instances": [1]}
    with pytest.raises(TritonizeError, match="bad --grid item 'gather=1'"):
        tune.parse_grid(["gather=1"])


def test_a_refusal_costs_the_overloads_cpu_beyond_its_answers_at_the_capacity_cost() -> None:
    from tritonize.bench.cpu import NICER
    from tritonize.bench.stress import refusal_cpu

    at_capacity = {"ms_per_request": {"tritonserver": 0.4, "minilm_model": 18.0, "client": 0.4},
                   NICER: {"minilm_model": 17.5}}
    # 1,000 answers and 10,000 refusals: 20 s of the stub's CPU, 18 of them the answers' at capacity; of the 2 s
    # more, 1.5 s on the graph's nicer threads (bigger batches), which no refusal reaches.
    overload = {"ms_per_request": {"tritonserver": 0.6, "minilm_model": 20.0, "client": 0.9},
                NICER: {"minilm_model": 19.0}}
    per = refusal_cpu(at_capacity, overload, answered=1000, refused=10000)
    assert per["minilm_model"] == pytest.approx(0.2) and per["tritonserver"] == pytest.approx(0.02)
    assert per["client"] == pytest.approx(0.05)
    assert per["server"] == pytest.approx(0.22)  # every process but the client
    assert per["off_model"]["minilm_model"] == pytest.approx(0.05) and per["off_model"]["server"] == pytest.approx(0.07)
    assert per["of_an_answer"] == pytest.approx(0.07 / 18.4, abs=1e-4)
    # 1% more per answer (0.009 ms of 0.9 at normal priority) over 1,000 answers moves 10,000 refusals' figure
    # by 0.0009 ms: resolved; 10 refusals' by 0.9 ms, more than 1% of an answer (0.184 ms): not
    assert per["drift_ms"] == pytest.approx(0.001, abs=1e-3) and per["resolved"]
    few = refusal_cpu(at_capacity, overload, answered=1000, refused=10)
    assert few["drift_ms"] == pytest.approx(0.9) and not few["resolved"]


def test_a_refusal_is_told_from_the_native_models_threads() -> None:
    """The production variant's model runs on threads of the server itself (cpu.NATIVE_MODEL, part of it): what
    its answers cost more under overload is not a refusal's, and it is counted once in the server's sum."""
    from tritonize.bench.cpu import NATIVE_MODEL
    from tritonize.bench.stress import refusal_cpu

    at_capacity = {"ms_per_request": {"tritonserver": 17.0, NATIVE_MODEL: 16.5, "minilm_tokenizer": 0.7, "client": 0.5}}
    # 1,000 answers, 5,000 refusals: the model's threads 2 ms more an answer (2 s), the rest of the server 0.5 s more
    # (0.1 ms a refusal), the tokenizer 3 s more (0.6 ms a refusal: it tokenized what the model's queue refused).
    overload = {"ms_per_request": {"tritonserver": 19.5, NATIVE_MODEL: 18.5, "minilm_tokenizer": 3.7, "client": 2.5}}
    per = refusal_cpu(at_capacity, overload, answered=1000, refused=5000)
    assert per["tritonserver"] == pytest.approx(0.5) and per[NATIVE_MODEL] == pytest.approx(0.4)
    assert per["server"] == pytest.approx(1.1)  # the model's threads are the server's: not counted twice
    assert per["off_model"]["tritonserver"] == pytest.approx(0.1) and NATIVE_MODEL not in per["off_model"]
    assert per["off_model"]["server"] == pytest.approx(0.7)
    assert per["of_an_answer"] == pytest.approx(0.7 / 17.7, abs=1e-4)
    assert refusal_cpu(at_capacity, overload, answered=1000, refused=0) == {}


def test_cpu_meter_tells_the_nicer_threads_apart(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tritonize.bench.cpu import NICER, SERVER, CpuMeter

    busy = "import time\nend = time.time() + 3\nwhile time.time() < end: pass\n"
    child = tmp_path / "child.py"
    child.write_text("import os\nos.nice(5)\n" + busy)
    leader = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.Popen([sys.executable, {str(child)!r}]); {busy!r} and exec({busy!r})"],
        start_new_session=True,
    )
    try:
        time.sleep(0.5)
        meter = CpuMeter(leader.pid, cores=2)
        meter.start()
        time.sleep(1.0)
        result = meter.finish(completed=100, client_cpu_s=0.05, wall_s=1.0)
    finally:
        os.killpg(leader.pid, signal.SIGKILL)  # the child too
        leader.wait()
    python = Path(sys.executable).name
    assert result[NICER][python] == pytest.approx(result["ms_per_request"][python], rel=0.05)  # snapshots a moment apart
    assert result[NICER][python] > 0.5 and SERVER not in result[NICER]  # the child ran, beside other work


def test_the_native_models_threads_are_its_production_instances(tiny_python_repo, tiny_embedding_repo) -> None:
    """The production variant's model step on the native backend runs one thread per instance inside the server
    (what the CPU meter tells apart); the fused step, and a graph layout's model, only where the backend is native."""
    from tritonize.bench.measured import measured_model, native_model_threads
    from tritonize.repository import parse_config
    from tritonize.spec import CONFIG_FILE, FUSED_VARIANT, MODEL, PRODUCTION_VARIANT, repo_paths

    for repo in (tiny_python_repo.repository, tiny_embedding_repo.repository):
        manifest = measured_model(repo)
        path = repo_paths(repo, manifest.name)[MODEL.key] / CONFIG_FILE
        config = parse_config(path.read_text(), str(path))
        expected = sum(g.count for g in config.instance_group) if config.platform == "onnxruntime_onnx" else 0
        assert native_model_threads(repo, manifest, PRODUCTION_VARIANT) == expected
        assert native_model_threads(repo, manifest, FUSED_VARIANT) == 0
    assert native_model_threads(tiny_python_repo.repository, measured_model(tiny_python_repo.repository),
                                PRODUCTION_VARIANT) >= 1
