"""What a benchmark run is asked (`BenchOptions`, from the CLI, tune, stress and the stand-in) and the names of
the systems it measures."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..spec import DEFAULT_VARIANT
from . import corpus, infinity, load, peers

TRITON_LABELS = {"grpc": "Triton gRPC", "http": "Triton HTTP", "api": "API /v1/embeddings",
                 "api-uncoalesced": "API, no coalescing", "api-grpc": "API, inferences over gRPC",
                 "front": "Triton HTTP via the API's front"}
FRONT = "front"  # Triton's HTTP/JSON requests sent to `tritonize api`'s /v2 routes (api/kserve/) instead
# The API's protocols: `tritonize api` in front of the measured server (its inferences to Triton's HTTP port), with
# --no-coalesce (each request alone), and with its inferences over gRPC (no --http-url).
API_PROTOCOLS = {"api": (), "api-uncoalesced": ("--no-coalesce",), "api-grpc": ("--http-url", "")}
API_SYSTEM = "triton-api"  # `tritonize api` in front of the measured server, its answers checked on their own
TRITON_SYSTEM = "triton"  # the checks: one for both protocols, the same server
FLOOR = "floor"
DEFAULT_CONCURRENCY = (1, 4, 16)
DEFAULT_PROTOCOLS = ("grpc", "http")
ALL_PEERS = (*peers.PEERS, *infinity.ENGINES, FLOOR)
SHARED_CPU_NOTE = (
    "The load generator runs on the same machine and shares its cores with the system under test; "
    "client_cpu_pct is how much of one core it used."
)


@dataclass
class BenchOptions:
    """Everything a run needs; the CLI and tune build one."""

    repository: Path
    # The model measured, where the repository holds several (default: its only model); with a repository of one
    # model, the name a server serves it under, where that differs.
    model: str = ""
    http_url: str = "127.0.0.1:8000"
    grpc_url: str = "127.0.0.1:8001"
    metrics_url: str = "127.0.0.1:8002"
    start_local: bool = False
    concurrency: list[int] = field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    workloads: list[str] = field(default_factory=lambda: list(corpus.TEXT_WORKLOADS))
    protocols: list[str] = field(default_factory=lambda: list(DEFAULT_PROTOCOLS))
    protocols_asked: bool = False  # named by the user: a protocol this model cannot take is then an error
    peers: list[str] = field(default_factory=lambda: list(ALL_PEERS))
    # Named by the user: a peer that is not installed is then an error, not a skip.
    peers_asked: bool = False
    infinity_python: str | None = None  # default: .venv-infinity/bin/python
    duration_s: float | None = 10.0
    requests: int | None = None
    warmup: int | None = None  # default: 2 x concurrency, at least 10
    output: Path = Path("bench_results")
    source_model: str | None = None  # the folder the peers load; default: tritonize.yaml's model
    corpus_file: Path | None = None
    short_tokens: int = corpus.DEFAULT_SHORT_TOKENS
    long_tokens: int = corpus.DEFAULT_LONG_TOKENS
    timeout_s: float = load.DEFAULT_TIMEOUT_S
    # More repositories of the same task (int8 beside fp32, say): Triton only, each on its own local server.
    compare: list[Path] = field(default_factory=list)
    # What a local server started for the run serves (spec.VARIANT_CONFIGS), and other variants of the same
    # repository to measure beside it, each on its own local server.
    variant: str = DEFAULT_VARIANT
    compare_variants: list[str] = field(default_factory=list)
    # Rows in each request of Triton's and the API's measurements: each size is measured in turn.
    texts_per_request: list[int] = field(default_factory=lambda: [1])
    # Measure the repository with its model step's graph replaced by one that costs next to nothing
    # (bench/stand_in.py): the host's CPU per request around the model.
    stand_in: bool = False
    quiet: bool = False

    def bound(self, concurrency: int) -> load.Bound:
        warmup = self.warmup if self.warmup is not None else max(10, 2 * concurrency)
        return load.Bound(requests=self.requests, duration_s=None if self.requests else self.duration_s, warmup=warmup)
