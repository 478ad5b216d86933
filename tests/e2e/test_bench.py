"""`tritonize bench` and `tritonize tune` on the tiny embedding model: structure and counts, not speed.

They start real servers (Triton, the Starlette peers) with request-bounded runs, so every count is exact.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tritonize import chain
from tritonize.cli import main
from tritonize.manifest import read_manifest
from tritonize.repository import parse_config, reconfigure
from tritonize.spec.options import Overrides

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- end to end ----------------------------------------------------------------

SYSTEMS = {"triton-grpc", "triton-http", "doc", "doc-batched"}


def test_bench_runs_every_system_with_exact_counts(tiny_python_repo, tmp_path, capsys) -> None:
    out = tmp_path / "results"
    rc = main([
        "bench", "--repository", str(tiny_python_repo.repository), "--start-local",
        "--requests", "40", "--warmup", "5", "--concurrency", "1,4", "--workloads", "short,mixed",
        "--short-tokens", "16", "--protocols", "grpc,http", "--peers", "doc,doc-batched,floor",
        "--output", str(out),
    ])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    assert set(doc["workloads"]) == {"short", "mixed"}
    encoder = chain.text_encoder(tiny_python_repo.repository)  # the served tokenizer: its buckets
    runs = doc["runs"]
    assert {(r["system"], r["workload"], r["concurrency"]) for r in runs} == {
        (s, w, c) for s in SYSTEMS for w in ("short", "mixed") for c in (1, 4)
    }
    for r in runs:
        assert r["completed"] == 40 and r["errors"] == 0, r
        lat = r["latency_ms"]
        assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
        assert r["throughput_rps"] > 0
        if r["system"].startswith("triton"):
            # Triton's own counters saw exactly the measured requests (warm-up excluded).
            assert r["steps"]["ensemble"]["requests"] == 40
            assert r["steps"]["model"]["inferences"] == 40
            assert r["steps"]["model"]["avg_batch"] >= 1
            assert r["breakdown"]["server_ms"] > 0
            # The workload's rows replayed through the served regrouping, at the batch the graph ran: rows of one
            # length (short: 16 tokens each) or one row at a time pad nothing; otherwise a group pads to its
            # longest row, so no more than the longest row over the shortest.
            waste, tokens = r["padding_waste"], doc["workloads"][r["workload"]]["tokens"]
            assert waste["real_tokens"] == pytest.approx(tokens["mean"] * doc["workloads"][r["workload"]]["rows"],
                                                         abs=0.05 * doc["workloads"][r["workload"]]["rows"])
            if r["workload"] == "short" or waste["batch"] == 1:
                assert waste["waste"] == 0 and waste["computed_tokens"] == waste["real_tokens"]
            else:
                assert 0 <= waste["waste"] <= tokens["max"] / tokens["min"] - 1
            # CPU per request, by process: the server and one stub per step, named by model.
            per = r["cpu"]["ms_per_request"]
            assert {"tritonserver", "client", r["steps"]["first"]["name"], r["steps"]["model"]["name"]} <= set(per)
            assert per[r["steps"]["model"]["name"]] > 0 and 0 <= r["cpu"]["idle_pct"] <= 100
            # The served steps' own counters saw exactly the measured texts and their tokens.
            served = r["served"]
            assert served["tritonize_texts_total"] == 40
            expected_tokens = {"short": 40 * 16, "mixed": None}[r["workload"]]
            if expected_tokens:
                assert served["tritonize_tokens_total"] == expected_tokens
            # Each request (one text) is padded to its length's bucket: exactly that for 16-token texts, and at
            # most the bucket of the workload's longest text for any.
            padded = served.get("tritonize_padded_tokens_total", 0)
            if r["workload"] == "short":
                assert padded == 40 * encoder.bucket(16)
                assert served["padding_waste"] == pytest.approx(encoder.bucket(16) / 16 - 1)
            else:
                assert served["tritonize_tokens_total"] <= padded <= 40 * encoder.bucket(tokens["max"])
        else:
            assert r["server"]["requests"] == 40
    for w in ("short", "mixed"):
        f = doc["floor"][w]
        assert f["batch1_latency_ms"]["requests"] == 40
        assert f["arrival"]["rps"] > 0 and f["sorted"]["rps"] > 0
    assert any(t["name"] == "p50 vs floor" for t in doc["targets"])
    # Every system answered the workloads' first rows as the floor does, before it was timed.
    assert set(doc["checks"]) == {"triton", "doc", "doc-batched"}
    assert all(c["passed"] and c["rows"] == 8 for by in doc["checks"].values() for c in by.values())
    assert (out / "bench.png").read_bytes()[:8] == PNG_MAGIC
    printed = capsys.readouterr().out
    assert "Triton gRPC" in printed and "HF doc server" in printed and "floor" in printed
    assert "CPU per request" in printed and "What the served steps counted" in printed


def test_bench_sends_an_indexers_requests_of_many_texts(tiny_python_repo, tmp_path) -> None:
    """--texts-per-request without --stand-in: each request to Triton holds that many texts (the model step counts
    every row), and the run says how many of its requests the server refused."""
    out = tmp_path / "results"
    rc = main(["bench", "--repository", str(tiny_python_repo.repository), "--start-local", "--requests", "12",
               "--warmup", "2", "--concurrency", "2", "--workloads", "short", "--protocols", "grpc", "--peers", "none",
               "--texts-per-request", "8", "--output", str(out)])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    (run,) = doc["runs"]
    assert (run["texts_per_request"], run["completed"], run["errors"], run["refused"]) == (8, 12, 0, 0)
    assert run["steps"]["ensemble"]["requests"] == 12 and run["steps"]["model"]["inferences"] == 96


def test_tune_writes_the_better_configuration_back(tiny_python_repo, tmp_path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(tiny_python_repo.repository, repo)
    # A 20 ms queue delay costs every request ~40 ms at low load: a clear loser.
    reconfigure(repo, Overrides(max_queue_delay_us=20000))
    rc = main([
        # A budget wide enough that one of Triton 2.51's 500 ms batcher stalls (docs/reliability.md) in a
        # 20-request run cannot disqualify the better configuration; the score still has to beat the start.
        "tune", "--repository", str(repo), "--grid", "max_queue_delay_us=0", "--requests", "20", "--warmup", "5",
        "--p99-budget-ms", "2000",
        "--concurrency", "1,2", "--output", str(tmp_path / "out"),
    ])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert [p["changes"] for p in result["points"]] == [{"max_queue_delay_us": 20000}, {"max_queue_delay_us": 0}]
    assert all(len(p["runs"]) == 2 and all(r["completed"] == 20 for r in p["runs"]) for p in result["points"])
    # The start is measured again after the other points; the score compares with its better measurement.
    again = result["start_again"]["runs"]
    assert len(again) == 2 and all(r["completed"] == 20 for r in again)
    assert result["chosen"] == {"max_queue_delay_us": 0}
    name = read_manifest(repo).name
    for config in (
        repo / name / "config.pbtxt",
        repo / f"{name}_tokenizer" / "config.pbtxt",
        repo / f"{name}_model" / "config.pbtxt",
        repo / f"{name}_model" / "configs" / "fused.pbtxt",
    ):
        parsed = parse_config(config.read_text(), str(config))
        if parsed.platform != "ensemble":
            assert parsed.dynamic_batching.max_queue_delay_microseconds == 0, config
    assert read_manifest(repo).options.max_queue_delay_us == 0
    # The chosen point's throughput at the highest concurrency is written as the capacity the queues follow.
    chosen = next(p for p in result["points"] if p["changes"] == result["chosen"])
    assert result["capacity_rps"] == round(next(r["throughput_rps"] for r in chosen["runs"] if r["concurrency"] == 2), 1)
    assert read_manifest(repo).options.capacity_rps == result["capacity_rps"] > 0
    # The shadow copies are gone; only real files remain in the repository.
    assert not any(p.is_symlink() for p in Path(repo).rglob("*"))


def test_tune_measures_the_apis_processes_and_writes_the_better_count(tiny_python_repo, tiny_classifier_repo,
                                                                      tmp_path, capsys, monkeypatch) -> None:
    """--api-workers: the API in front of the chosen configuration with each count, the count the repository had
    first; the count written is the one the rule picks from what was measured, and the API starts that many."""
    from tritonize.api import server
    from tritonize.bench.tune import pick, Point

    repo = tmp_path / "repo"
    shutil.copytree(tiny_python_repo.repository, repo)
    rc = main(["tune", "--repository", str(repo), "--grid", "max_queue_delay_us=0", "--api-workers", "2,1",
               "--requests", "20", "--warmup", "5", "--p99-budget-ms", "5000", "--concurrency", "1,4",
               "--output", str(tmp_path / "out")])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "tune.json").read_text())
    measured = result["api_points"]
    assert [p["workers"] for p in measured] == [1, 2]  # the repository's count (none measured: one) first
    assert all(not p["error"] and [r["completed"] for r in p["runs"]] == [20, 20] for p in measured)
    points = [Point({"api_workers": p["workers"]}, p["runs"]) for p in measured]
    want = pick(points, points[0].rps(), result["api_budget_p99_ms"]).changes["api_workers"]
    assert result["api_workers_before"] == 1 and result["api_workers"] == want
    assert read_manifest(repo).options.api_workers == want
    monkeypatch.delenv(server.WORKERS_ENV, raising=False)
    assert server.workers_default(repo) == want  # what `tritonize api` starts where nothing else says
    capsys.readouterr()
    assert main(["tune", "--repository", str(tiny_classifier_repo.repository), "--api-workers", "1,2"]) != 0
    assert "--api-workers measures the API's /v1/embeddings" in capsys.readouterr().err


def test_bench_rerank_measures_each_ranker_and_what_late_interaction_is_made_of(tmp_path, capsys) -> None:
    """A cross-encoder and a late-interaction model in one repository: each one's rerank, the late-interaction
    model's documents' encoding alone, and its MaxSim alone, with exact request counts."""
    from support import model_zoo
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    repo = tmp_path / "repo"
    ranker = model_zoo.build("bert-cross-encoder", tmp_path / "zoo")
    colbert = model_zoo.build_multi_vector(tmp_path / "colbert")
    generate(GenerateOptions(model=str(ranker), name="ranker", output=str(repo)))
    generate(GenerateOptions(model=str(colbert), name="colbert", output=str(repo), add=True))
    out = tmp_path / "results"
    rc = main(["bench-rerank", "--repository", str(repo), "--start-local", "--documents", "5", "--queries", "3",
               "--warmup", "1", "--output", str(out)])
    assert rc == 0
    doc = json.loads((out / "rerank.json").read_text())
    assert doc["documents"] == 5 and doc["queries"] == 3
    measured = {(r["model"], r["what"]): r for r in doc["rows"]}
    assert set(measured) == {("ranker", "rerank"), ("colbert", "rerank"), ("colbert", "encode documents"),
                             ("colbert", "MaxSim alone (in process)")}
    assert all(r["p50_ms"] > 0 for r in doc["rows"])
    assert all(r["documents_per_s"] > 0 for r in doc["rows"] if r["route"])
    assert "| colbert | multi-vector | rerank /v1/rerank |" in capsys.readouterr().out
    assert main(["bench-rerank", "--repository", str(repo), "--models", "nope", "--output", str(out)]) != 0


def test_bench_stand_in_measures_the_host_cpu_around_a_model_that_costs_nothing(tiny_embedding_repo, native_backend,
                                                                                tmp_path, capsys) -> None:
    """The production variant with the model step's graph replaced, over gRPC and the API, one text and eight to a
    request, then the empty ensemble and the empty ASGI endpoint: every figure adds up, and the stand-in's own
    share is small; a request the API refuses is measured with the API up, against a served one."""
    from tritonize.bench import api_costs
    from tritonize.bench.asgi_floor import LABEL
    from tritonize.bench.cpu import API, CLIENT, SERVER
    from tritonize.bench.stand_in import EMPTY_SYSTEM, h100_rows_per_s

    out = tmp_path / "results"
    rc = main(["bench", "--repository", str(tiny_embedding_repo.repository), "--stand-in", "--requests", "60",
               "--warmup", "10", "--concurrency", "4", "--workloads", "short", "--texts-per-request", "1,8",
               "--protocols", "grpc,api", "--output", str(out)])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    assert doc["meta"]["variant"] == "production"
    assert all(c["passed"] for by in doc["checks"].values() for c in by.values())  # answered as the in-process chain
    served = [r for r in doc["runs"] if r["system"] != api_costs.REFUSED_SYSTEM]
    shapes = {(r["system"], r["texts_per_request"]) for r in served + doc["empty"] + doc["api_floor"]}
    assert shapes == {(s, n) for s in ("triton-grpc", "triton-api", EMPTY_SYSTEM, api_costs.FLOOR_SYSTEM) for n in (1, 8)}
    (refused,) = [r for r in doc["runs"] if r["system"] == api_costs.REFUSED_SYSTEM]
    assert refused["completed"] == 60 and refused["errors"] == 0  # each answered 422, as the sender expects
    assert 0 < refused["host_cpu"]["us_per_request"][API]
    # At concurrency 4 only the refusal's target has its runs; it compares the API's CPU alone.
    (target,) = doc["targets"]
    single = next(r for r in served if r["system"] == "triton-api" and r["texts_per_request"] == 1)
    assert target["value"] == pytest.approx(refused["host_cpu"]["us_per_request"][API]
                                            / single["host_cpu"]["us_per_request"][API], abs=0.001)
    for r in doc["api_floor"]:
        assert r["completed"] == 60 and set(r["host_cpu"]["us_per_row"]) == {LABEL, CLIENT}
    name = tiny_embedding_repo.name
    # generate's default tokenizes in the model step's graph: no Python stub, and that graph's tokenizer is kept
    in_graph = read_manifest(tiny_embedding_repo.repository).options.tokenizer == "graph"
    stubs = set() if in_graph else {f"{name}_tokenizer", f"{name}_statistics"}
    for r in served + doc["empty"]:
        assert r["completed"] == 60 and r["errors"] == 0, r
        h, n = r["host_cpu"], r["texts_per_request"]
        server = [k for k in h["us_per_row"] if k != CLIENT]
        expected = {SERVER} | (stubs if r["system"] != EMPTY_SYSTEM else set())
        assert set(server) == expected | ({API} if r["system"] == "triton-api" else set())
        # Per process, per request and per row, add up to the server's total; the client is apart.
        assert h["server_us_per_request"] == pytest.approx(sum(h["us_per_request"][k] for k in server), abs=0.5)
        assert h["server_us_per_row"] == pytest.approx(h["server_us_per_request"] / n, rel=0.01)
        assert h["h100_rows_per_s"] == h100_rows_per_s(16)
        assert h["cores_per_h100"] == pytest.approx(h["server_us_per_row"] * 1e-6 * h["h100_rows_per_s"], abs=0.02)
        # The stand-in's executions are a small part of the server's CPU (about 3% here) where the model step only
        # runs the model; the empty step's are Triton's own cost, and a graph that tokenizes does its tokenizing.
        small = 1 if r["system"] == EMPTY_SYSTEM or in_graph else 0.15
        assert 0 < h["model_us_per_row"] < small * h["server_us_per_row"], h
    printed = capsys.readouterr().out
    assert "Host cores one H100 needs" in printed and "empty ensemble" in printed
    # The real repository still serves its own graph: the stand-in lives in the run's shadow copy.
    graph = parse_config((tiny_embedding_repo.repository / f"{name}_model" / "config.pbtxt").read_text())
    served_file = tiny_embedding_repo.repository / f"{name}_model" / "1" / graph.default_model_filename
    stand_in = out / ".run" / "stand-in" / f"{name}_model" / "1" / graph.default_model_filename
    assert served_file.is_file() and not served_file.is_symlink()
    assert stand_in.stat().st_size < (served_file.stat().st_size if in_graph else 10_000)


def test_bench_stand_in_serves_a_classifiers_stand_in_over_grpc_alone(tiny_classifier_repo, native_backend,
                                                                      tmp_path) -> None:
    """Another task's graph ([B, labels]) loads on the native backend as its stand-in; the API, which serves
    embeddings to the bench, is left out of the default protocols."""
    out = tmp_path / "results"
    rc = main(["bench", "--repository", str(tiny_classifier_repo.repository), "--stand-in", "--requests", "20",
               "--warmup", "5", "--concurrency", "2", "--workloads", "short", "--texts-per-request", "4",
               "--output", str(out)])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    assert doc["meta"]["protocols"] == ["grpc"] and doc["checks"]["triton"]["short"]["passed"]
    (run,) = doc["runs"]
    assert run["completed"] == 20 and run["errors"] == 0 and run["steps"]["model"]["inferences"] == 80
    assert run["host_cpu"]["cores_per_h100"] > 0 and doc["empty"][0]["completed"] == 20
