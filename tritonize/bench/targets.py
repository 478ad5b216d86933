"""The project's performance targets, checked against one run's figures.

Each target compares Triton over gRPC with the in-process floor or the
batched peer measured in the same run, so the verdicts hold for any
model and machine. A target is skipped when its inputs were not measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .report import client_inclusive_floor, compared_system, floor_best

LATENCY_SLACK_MS = {"short": 1.5, "long": 3.0}  # p50 over the floor's batch-1 p50, at concurrency 1
# p99 over p50 on fixed-length texts, by concurrency (at LOADED a request may wait behind a whole batch).
TAIL_RATIO = {1: 2.0, 4: 2.0, 16: 3.0}
MIXED_TAIL_RATIO = 1.5  # mixed lengths (40-fold apart): p99 at concurrency 1 over the floor's batch-1 p99
FLOOR_SHARE = {"short": 0.8, "long": 0.8, "mixed": 0.8}  # of the floor's best batch (mixed: length-sorted)
# Of the client-inclusive floor (the floor's CPU per row plus the load generator's per request, every core busy).
CLIENT_FLOOR_SHARE = 0.9
PEER_RATIO = {"short": 1.5, "long": 1.3, "mixed": 3.0}  # over the doc server with batching
PEER_RATIO = {"short": 2.0, "long": 1.2, "mixed": 2.0}  # over Infinity's engines, the peer a user would pick
SCALING = (4, 1, 1.5, ("short", "mixed"))  # concurrency 4 over concurrency 1: the ratio, on these workloads
PEERS = ("infinity", "infinity-onnx")
# A compared repository of this precision over the measured fp32 one (bench --compare), by workload.
PRECISION_RATIO = {"int8": {"short": 2.0, "mixed": 2.0}}
LOADED = 16  # the concurrency of the throughput targets
TRITON = "triton-grpc"
API = "triton-api"
# `tritonize api` over the gRPC it fronts (same server, same run): the share of throughput it keeps at LOADED,
# the milliseconds it may add to p50 at concurrency 1, and its throughput over Infinity's /embeddings.
API_SHARE = {"short": 0.85, "mixed": 0.95}
API_SLACK_MS = 1.0
API_PEER_RATIO = {"short": 1.5, "mixed": 1.5}


@dataclass(frozen=True)
class Target:
    name: str
    workload: str
    concurrency: int
    value: float
    limit: float
    passed: bool
    rule: str
    # What the floor itself reaches on the same measure, where it bounds the target (concurrency 4 over 1).
    floor_reaches: float | None = None


def _find(runs: list[dict], system: str, workload: str, concurrency: int) -> dict | None:
    for r in runs:
        if r["system"] == system and r["workload"] == workload and r["concurrency"] == concurrency:
            return r
    return None


def evaluate(document: dict) -> list[dict]:
    runs, floor = document.get("runs", []), document.get("floor", {})
    found: list[Target] = []
    for w in ("short", "long", "mixed"):
        one = _find(runs, TRITON, w, 1)
        f = floor.get(w)
        if one and f and w in LATENCY_SLACK_MS:
            p50, limit = one["latency_ms"]["p50"], f["batch1_latency_ms"]["p50"] + LATENCY_SLACK_MS[w]
            found.append(Target("p50 vs floor", w, 1, p50, round(limit, 3), p50 <= limit,
                                f"p50 <= floor batch-1 p50 + {LATENCY_SLACK_MS[w]:g} ms"))
        found += _tails(runs, w, f)
        loaded = _find(runs, TRITON, w, LOADED)
        best = floor_best(document, loaded) if loaded else None
        if best:
            limit = FLOOR_SHARE[w] * best["rps"]
            rps = loaded["throughput_rps"]
            found.append(Target("throughput vs floor", w, LOADED, rps, round(limit, 2), rps >= limit,
                                f">= {FLOOR_SHARE[w]:g} x floor best batch ({best['order']})"))
        inclusive = client_inclusive_floor(document, loaded) if loaded else None
        if inclusive:
            limit, rps = CLIENT_FLOOR_SHARE * inclusive["rps"], loaded["throughput_rps"]
            found.append(Target("throughput vs client-inclusive floor", w, LOADED, rps, round(limit, 2), rps >= limit,
                                f">= {CLIENT_FLOOR_SHARE:g} x (floor + client CPU per request, every core)"))
        more, fewer, ratio, workloads = SCALING
        if w in workloads:
            ceiling = ((f or {}).get("scaling_ceiling") or {}).get(str(more))
            found += [replace(t, rule=f"{t.rule} (the floor's own: {ceiling:.2f} x)", floor_reaches=ceiling) if ceiling else t
                      for t in _over(f"concurrency {more} vs {fewer}", w, _find(runs, TRITON, w, more),
                                     _find(runs, TRITON, w, fewer), ratio, f"Triton gRPC at concurrency {fewer}", at=more)]
        found += _ratios(loaded, [("doc-batched", "doc + batching", PEER_RATIO, "doc server with batching")]
                         + [(p, p, PEER_RATIO, p) for p in PEERS], runs, w)
        found += _precision(document, loaded, w)
        found += _api(runs, w)
    return [asdict(t) for t in found]


def _tails(runs: list[dict], w: str, f: dict | None) -> list[Target]:
    """No stalls: p99 within a few p50 at each concurrency on fixed-length texts; on mixed lengths, p99 at
    concurrency 1 within reach of the floor's own p99 (the long texts are the tail)."""
    found: list[Target] = []
    for c, ratio in TAIL_RATIO.items():
        run = _find(runs, TRITON, w, c)
        if run and run.get("latency_ms") and w in LATENCY_SLACK_MS:
            p50, p99 = run["latency_ms"]["p50"], run["latency_ms"]["p99"]
            found.append(Target("p99 tail", w, c, p99, round(ratio * p50, 3), p99 <= ratio * p50, f"p99 <= {ratio:g} x p50"))
    one = _find(runs, TRITON, w, 1)
    if w == "mixed" and one and f:
        p99, limit = one["latency_ms"]["p99"], MIXED_TAIL_RATIO * f["batch1_latency_ms"]["p99"]
        found.append(Target("p99 vs floor", w, 1, p99, round(limit, 3), p99 <= limit,
                            f"p99 <= {MIXED_TAIL_RATIO:g} x floor batch-1 p99"))
    return found


def _api(runs: list[dict], w: str) -> list[Target]:
    """The API must not give back what Triton wins: its share of gRPC's throughput, its added p50, its lead
    over Infinity's OpenAI-style route."""
    found: list[Target] = []
    api, grpc = _find(runs, API, w, LOADED), _find(runs, TRITON, w, LOADED)
    if w in API_SHARE:
        found += _over("API vs gRPC throughput", w, api, grpc, API_SHARE[w], "Triton gRPC, the same server")
        found += [t for p in PEERS for t in _over(f"API vs {p}", w, api, _find(runs, p, w, LOADED),
                                                  API_PEER_RATIO[w], f"{p}'s /embeddings")]
    one_api, one_grpc = _find(runs, API, w, 1), _find(runs, TRITON, w, 1)
    if one_api and one_grpc:
        p50, limit = one_api["latency_ms"]["p50"], one_grpc["latency_ms"]["p50"] + API_SLACK_MS
        found.append(Target("API p50 vs gRPC", w, 1, p50, round(limit, 3), p50 <= limit,
                            f"p50 <= gRPC p50 + {API_SLACK_MS:g} ms"))
    return found


def _over(name: str, w: str, faster: dict | None, slower: dict | None, ratio: float, described: str,
          at: int = LOADED) -> list[Target]:
    """`faster`'s throughput (at concurrency `at`) at least `ratio` x `slower`'s, both measured in this run."""
    if not faster or not slower:
        return []
    limit, rps = ratio * slower["throughput_rps"], faster["throughput_rps"]
    return [Target(name, w, at, rps, round(limit, 2), rps >= limit, f">= {ratio:g} x {described}")]


def _ratios(loaded: dict | None, others: list[tuple[str, str, dict, str]], runs: list[dict], w: str) -> list[Target]:
    """Triton's throughput over each other system's."""
    return [t for system, name, ratio, described in others if w in ratio
            for t in _over(f"throughput vs {name}", w, loaded, _find(runs, system, w, LOADED), ratio[w], described)]


def _precision(document: dict, loaded: dict | None, w: str) -> list[Target]:
    """Each compared repository whose precision has a target, over the measured fp32 repository."""
    if document.get("meta", {}).get("precision") != "fp32":
        return []
    found = []
    for tag, info in (document.get("compared") or {}).items():
        ratio = PRECISION_RATIO.get(info.get("precision"), {})
        if w in ratio:
            mine = _find(document.get("runs", []), compared_system(TRITON, tag), w, LOADED)
            found += _over(f"{tag} vs fp32 throughput", w, mine, loaded, ratio[w], "fp32 Triton (the measured repository)")
    return found
