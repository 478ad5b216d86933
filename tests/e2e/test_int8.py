"""An int8 repository served: the local server answers what the int8 graph computes, and bench measures it
beside fp32 in one run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.stopping import serving
from tritonize.chain import in_process
from tritonize.cli import main


def test_the_local_server_answers_what_the_int8_graph_computes(int8_repo, local_options, local_triton, tmp_path) -> None:
    from tritonize.client import TextClient
    from tritonize.runtime.local import LocalRuntime

    texts = ["int8 on a CPU", "the quick brown fox jumps over the lazy dog", "x"]
    chain = in_process(int8_repo)
    expected = np.concatenate([chain([(t,)]).outputs["embedding"] for t in texts])
    with serving(LocalRuntime(local_options(int8_repo, tmp_path / "run"), quiet=True)) as endpoints:
        client = TextClient(endpoints.grpc, "emb8", protocol="grpc")
        alone = np.concatenate([client.embed([t]) for t in texts])
        together = client.embed(texts)
    np.testing.assert_allclose(alone, expected, atol=1e-5)  # a text alone: exactly what the int8 graph computes
    # Dynamic quantization scales a batch's activations together, so a text's answer moves a little with the
    # texts batched beside it (docs/benchmark.md, int8); the direction stays.
    cosines = (alone * together).sum(1) / np.linalg.norm(alone, axis=1) / np.linalg.norm(together, axis=1)
    assert cosines.min() > 0.9999


def test_bench_measures_the_int8_repository_beside_fp32_in_one_run(int8_repo, tiny_embedding_repo, local_triton,
                                                                     tmp_path) -> None:
    """`bench --compare`: the int8 target's two figures come from one run, each repository on its own server."""
    out = tmp_path / "results"
    assert main(["bench", "-r", str(tiny_embedding_repo.repository), "--start-local", "--compare", str(int8_repo),
                 "--requests", "32", "--warmup", "5", "--concurrency", "16", "--workloads", "short", "--short-tokens", "16",
                 "--protocols", "grpc", "--peers", "none", "-o", str(out)]) == 0
    doc = json.loads((out / "bench.json").read_text())
    assert doc["meta"]["precision"] == "fp32"
    assert doc["compared"] == {"int8": {"repository": str(int8_repo.resolve()), "model": "emb8", "precision": "int8"}}
    runs = {r["system"]: r for r in doc["runs"]}
    assert set(runs) == {"triton-grpc", "triton-grpc/int8"}
    int8 = runs["triton-grpc/int8"]
    # Measured on its own server: its counters saw exactly its requests, its model step is the int8 repository's.
    assert int8["completed"] == 32 and int8["errors"] == 0 and int8["steps"]["ensemble"]["requests"] == 32
    assert int8["steps"]["model"]["name"] == "emb8_model" and int8["cpu"]["ms_per_request"]["tritonserver"] > 0
    assert int8["label"] == "Triton gRPC int8"
    # Checked against its own graph in-process, not against the fp32 floor.
    assert all(c["passed"] for c in doc["checks"]["triton/int8"].values())
    [target] = [t for t in doc["targets"] if t["name"] == "int8 vs fp32 throughput"]
    assert target["value"] == int8["throughput_rps"]
    assert target["limit"] == pytest.approx(2.0 * runs["triton-grpc"]["throughput_rps"], abs=0.01)
