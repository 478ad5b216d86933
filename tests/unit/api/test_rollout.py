"""A rollout's arithmetic: the canary's split and stickiness, the bounds that roll it back, a shadow's agreement and
the gate on promoting a re-export (tritonize/rollout_state.py), and the state file both writers share."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np

from tritonize.rollout_state import (
    BOUNDS,
    CANARY,
    COSINE,
    NEIGHBOURS,
    ROLLED_BACK,
    SHADOW,
    Observed,
    Rollout,
    breach,
    cosine_gate,
    cosines,
    editing,
    promotion_refusal,
    rank_overlap,
    re_export,
    read_rollouts,
    to_candidate,
)


def within_binomial(hits: int, n: int, percent: float, sigmas: float = 4.0) -> bool:
    p = percent / 100
    return abs(hits - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_random_callers_are_split_within_the_binomial_bound_of_the_weight() -> None:
    rng = random.Random(7)
    for percent in (1, 10, 50):
        hits = sum(to_candidate(percent, "m", None, rng) for _ in range(10_000))
        assert within_binomial(hits, 10_000, percent), (percent, hits)


def test_a_named_caller_always_lands_on_the_same_side_and_callers_split_by_the_weight() -> None:
    callers = [f"user-{i}" for i in range(5_000)]
    sides = [to_candidate(10, "m", c) for c in callers]
    assert sides == [to_candidate(10, "m", c) for c in callers]
    assert within_binomial(sum(sides), len(callers), 10)
    # the place is per model: a caller is not on every model's canary at once
    assert sides != [to_candidate(10, "other", c) for c in callers]


def test_the_error_rate_bound_needs_its_minimum_of_requests() -> None:
    fast = 0.01
    few = [(False, fast)] * 5 + [(True, fast)] * (BOUNDS.min_requests - 6)
    assert breach(few, [fast] * 100) is None  # 19 requests: not judged yet
    assert "error rate" in breach(few + [(True, fast)], [fast] * 100)  # 5 of 20 failed
    one = [(False, fast)] + [(True, fast)] * (BOUNDS.min_requests - 1)
    assert breach(one, [fast] * 100) is None  # 5%: at the bound, not over it


def test_the_latency_bound_is_twice_the_served_p99_and_more_than_scheduling_noise() -> None:
    main = [0.010] * 100
    assert "p99" in breach([(True, 0.100)] * 100, main)
    assert breach([(True, 0.025)] * 100, main) is None  # 2.5x, but 15 ms over: noise on a busy host
    assert breach([(True, 0.100)] * (BOUNDS.min_latency_requests - 1), main) is None
    assert breach([(True, 0.100)] * 100, [0.01] * (BOUNDS.min_latency_requests - 1)) is None


def test_cosines_of_a_re_export_are_one_and_of_another_model_are_not() -> None:
    rng = np.random.default_rng(0)
    old = rng.normal(size=(8, 16)).astype(np.float32)
    np.testing.assert_allclose(cosines(old, old * 3), 1.0, atol=1e-6)
    assert (cosines(old, rng.normal(size=(8, 16))) < 0.9).all()


def test_rank_overlap_compares_neighbours_within_each_versions_own_space() -> None:
    rng = np.random.default_rng(1)
    old = rng.normal(size=(30, 16))
    rotation, _ = np.linalg.qr(rng.normal(size=(16, 16)))
    np.testing.assert_allclose(rank_overlap(old, old @ rotation), 1.0)  # a rotated space: the same neighbours
    wider = np.concatenate([old, np.zeros((30, 8))], axis=1)  # another size, the same geometry
    np.testing.assert_allclose(rank_overlap(old, wider), 1.0)
    unrelated = rank_overlap(old, rng.normal(size=(30, 16)), k=5)
    assert unrelated.mean() < 0.5
    assert rank_overlap(old[:1], old[:1]).size == 0  # one text has no neighbours


def test_a_re_export_is_the_same_model_read_the_same_way_exported_otherwise() -> None:
    entry = {"model": "/src", "name": "m", "precision": "fp32", "version": 1, "max_length": 64,
             "resolved_model": {"source": "/src", "architecture": "BertModel"}}
    assert re_export(entry, {**entry, "precision": "fp16", "version": 2, "optimize": True})
    assert not re_export(entry, {**entry, "model": "/other", "version": 2})
    assert not re_export(entry, {**entry, "max_length": 32})
    assert not re_export(None, entry)


def test_the_gate_is_the_cosine_verification_held_the_graph_to() -> None:
    fp16 = {"stages": {"export": {"metric": "max_abs", "threshold": 1e-4}, "fp16": {"metric": "min_cosine",
                                                                                    "threshold": 0.999}}}
    assert cosine_gate(fp16, 0.5) == 0.999
    assert cosine_gate({"stages": {"export": {"metric": "max_abs", "threshold": 1e-4}}}, 0.999) == 0.999


def test_promote_is_refused_below_the_gate_or_before_enough_texts() -> None:
    shadow = Rollout("m", SHADOW, 1, 2, 20, comparison=COSINE, gate=0.999,
                     observed=Observed(requests=50, agreement=0.9995, agreement_min=0.998))
    assert "below the verification gate of 0.999" in promotion_refusal(shadow)
    assert "at least" in promotion_refusal(replace(shadow, observed=Observed(requests=3, agreement_min=1.0)))
    assert promotion_refusal(replace(shadow, observed=Observed(requests=50, agreement_min=0.9999))) is None
    assert promotion_refusal(replace(shadow, comparison=NEIGHBOURS, gate=None)) is None  # a new model: judged by eye
    assert promotion_refusal(Rollout("m", CANARY, 1, 2, 10)) is None


def test_the_state_file_round_trips_and_disappears_with_its_last_rollout(tmp_path) -> None:
    with editing(tmp_path) as rollouts:
        rollouts["m"] = Rollout("m", CANARY, 1, 2, 10)
    with editing(tmp_path) as rollouts:
        rollouts["m"] = replace(rollouts["m"], state=ROLLED_BACK, reason="error rate", observed=Observed(20, 3))
    found = read_rollouts(tmp_path)["m"]
    assert (found.state, found.reason, found.observed.errors, found.candidate_name) == (ROLLED_BACK, "error rate", 3,
                                                                                      "m_candidate")
    assert not found.routed
    with editing(tmp_path) as rollouts:
        rollouts.clear()
    assert read_rollouts(tmp_path) == {} and not (tmp_path / "rollout.json").exists()


def test_a_rollout_written_is_routed_within_the_refresh_bound(tmp_path) -> None:
    """The API stats the state file at most every REFRESH_S; a canary written by `deploy.py` is routed after it."""
    import time

    from prometheus_client import CollectorRegistry

    from tritonize.api.rollout_routing import REFRESH_S, Rollouts, Target

    routing = Rollouts(tmp_path, CollectorRegistry(), lambda name: 1)
    assert routing.target("m", "a caller") == Target("m", 1)
    with editing(tmp_path) as rollouts:
        rollouts["m"] = Rollout("m", CANARY, 1, 2, 100)
    time.sleep(REFRESH_S)
    assert routing.target("m", "a caller") == Target("m_candidate", 2, candidate=True)
    with editing(tmp_path) as rollouts:
        rollouts.clear()
    time.sleep(REFRESH_S)
    assert routing.target("m", "a caller") == Target("m", 1)
