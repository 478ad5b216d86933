"""Canary and shadow rollouts on one local Triton and one API: a classifier's canary (its split, its sticky callers,
the rollback it does by itself when the candidate fails) and an embedder's shadow (never answered, its agreement,
its promotion)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from support.api import start_api, stop
from support.stopping import stop_later
from support.tiny_models import build_classifier, build_embedding_model
from tritonize.chain import in_process
from tritonize.cli import main
from tritonize.rollout_state import CANARY, COSINE, ROLLED_BACK, SHADOW, read_rollouts
from tritonize.runtime import candidate
from tritonize.runtime.local import LocalRuntime
from tritonize.runtime.versions import ready_versions

CLS, EMB = "tinycls", "tinyemb"
TEXTS = ["a new version of the model", "zero downtime", "the quick brown fox jumps over the lazy dog", "canary"]


@pytest.fixture(scope="module")
def stack(local_triton, local_options, tmp_path_factory):
    """A classifier and an embedder, each with a version 2 that re-exports version 1 (fp32), served under model
    control at version 1, with the API in front."""
    base = tmp_path_factory.mktemp("rollout")
    cls_src, emb_src = build_classifier(base / "cls-src"), build_embedding_model(base / "emb-src")
    repo = base / "repo"
    assert main(["generate", "--model", str(cls_src), "--name", CLS, "--output", str(repo)]) == 0
    assert main(["generate", "--model", str(emb_src), "--name", EMB, "--output", str(repo), "--add"]) == 0
    runtime = LocalRuntime(local_options(repo, base / "run", model_control="explicit"), quiet=True)
    endpoints = runtime.up()
    try:
        floor = np.concatenate([in_process(repo, name=EMB)([(t,)]).outputs["embedding"] for t in TEXTS])
        for name, src in ((CLS, cls_src), (EMB, emb_src)):
            assert main(["generate", "--model", str(src), "--name", name, "--output", str(repo), "--version", "2"]) == 0
        api = start_api(repo, endpoints.grpc)
        try:
            yield repo, runtime, api, floor
        finally:
            stop(api)
    finally:
        stop_later(runtime)


def predict(api, caller: str | None = None) -> str:
    status, headers, _ = api.call("POST", "/predict", {"model": CLS, "inputs": "a fine day"},
                                  headers={"X-Caller-Id": caller} if caller else None)
    assert status == 200
    return headers["X-Model-Version"]


def test_a_shadow_is_never_answered_agrees_exactly_as_an_fp32_re_export_and_is_promoted(stack) -> None:
    repo, runtime, api, floor = stack
    server = runtime.controlled()
    with pytest.raises(Exception, match="use `canary`"):
        candidate.start(server, CLS, SHADOW, 2, 20)
    started = candidate.start(server, EMB, SHADOW, 2, 100)
    assert started.comparison == COSINE and started.gate == pytest.approx(0.999)

    def embed(i: int) -> tuple[str, np.ndarray]:
        texts = [TEXTS[i % 4], TEXTS[(i + 1) % 4]]
        status, headers, body = api.call("POST", "/v1/embeddings", {"model": EMB, "input": texts})
        assert status == 200
        np.testing.assert_allclose([d["embedding"] for d in body["data"]], floor[[i % 4, (i + 1) % 4]], atol=1e-5)
        return headers["X-Model-Version"]

    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(embed, range(30))) == {"1"}  # every answer is the served version's
    deadline = time.monotonic() + 10
    while read_rollouts(repo)[EMB].observed.requests < 60 and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = read_rollouts(repo)[EMB].observed
    assert seen.requests == 60 and seen.errors == 0
    assert seen.agreement_min == pytest.approx(1.0, abs=1e-6)
    done = candidate.promote(server, EMB)
    assert done.version == 2 and done.previous == (1,)
    ready = ready_versions(server.client, server.headers)
    assert ready[EMB] == {2} and ready[f"{EMB}_model"] == {2} and f"{EMB}_candidate" not in ready
    assert EMB not in read_rollouts(repo)
    status, headers, _ = api.call("POST", "/v1/embeddings", {"model": EMB, "input": "after"})
    assert status == 200


def test_a_canary_splits_by_its_weight_keeps_callers_and_rolls_back_by_itself_when_it_fails(stack) -> None:
    repo, runtime, api, _ = stack
    server = runtime.controlled()
    with pytest.raises(Exception, match="use `shadow`"):
        candidate.start(server, EMB, CANARY, 2, 10)
    started = candidate.start(server, CLS, CANARY, 2, 10)
    assert (started.main, started.candidate) == (1, 2)
    client = server.client
    assert ready_versions(client, server.headers)[f"{CLS}_candidate"] == {2}
    assert ready_versions(client, server.headers)[f"{CLS}_model"] == {1, 2}

    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(lambda _: predict(api), range(1000)))
    hits = versions.count("2")
    assert versions.count("1") + hits == 1000
    assert abs(hits - 100) <= 4 * (1000 * 0.1 * 0.9) ** 0.5, hits  # within 4 sigma of the weight

    with ThreadPoolExecutor(8) as pool:
        sides = list(pool.map(lambda c: {predict(api, f"caller-{c}") for _ in range(5)}, range(40)))
    assert all(len(s) == 1 for s in sides)  # each caller stays on one version
    assert {v for s in sides for v in s} == {"1", "2"}

    client.unload_model(f"{CLS}_candidate", headers=server.headers)  # the candidate fails from here on
    with ThreadPoolExecutor(8) as pool:
        after = list(pool.map(lambda _: predict(api), range(600)))  # every caller still answered (200)
    assert after[-100:] == ["1"] * 100
    state = read_rollouts(repo)[CLS]
    assert state.state == ROLLED_BACK and "error rate" in state.reason
    undone = candidate.rollback(server, CLS)
    assert undone.main == 1 and CLS not in read_rollouts(repo)
    ready = ready_versions(client, server.headers)
    assert ready[CLS] == {1} and ready[f"{CLS}_model"] == {1} and f"{CLS}_candidate" not in ready
    assert not (repo / f"{CLS}_candidate").exists()
    stop(api)
    log = api.process.stdout.read().decode()
    assert f"canary {CLS} version 2 rolled back: error rate" in log
