"""`tritonize bench-rerank`: reranking N documents per query through the API, model beside model, in one run.

A cross-encoder reads every (query, document) pair; a late-interaction (multi-vector) model encodes the query and
each document on their own and scores them by MaxSim in the API. Both answer `/v1/rerank`; this measures them on the
same queries and documents, one after the other, and for a multi-vector model also what its rerank is made of: the
documents' encoding alone (its vectors route) and MaxSim alone, in this process, over the vectors the server returned.

    tritonize bench-rerank --repository triton_repo --start-local --models ranker,colbert --documents 100
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..console import err, out
from ..errors import TritonizeError
from ..spec import DEFAULT_VARIANT, VARIANT_CONFIGS
from . import corpus, load
from .cli import int_list
from .measured import triton_endpoints
from .options import BenchOptions

RERANK_PATH = "/v1/rerank"
QUERY_WORDS = (4, 16)  # a query is a corpus line of this many words
MAXSIM_ROUNDS = 30
CLIENT_BATCH = 32  # texts per request, within any ensemble's max batch size
JSON_NAME = "rerank.json"


@dataclass
class RerankOptions:
    repository: Path
    models: list[str]  # empty: every model of the repository that /v1/rerank serves
    documents: int = 100
    queries: int = 20  # requests per measurement
    concurrency: list[int] = field(default_factory=lambda: [1])
    warmup: int = 3
    start_local: bool = False
    http_url: str = "127.0.0.1:8000"
    grpc_url: str = "127.0.0.1:8001"
    variant: str = DEFAULT_VARIANT
    output: Path = Path("bench_results")
    timeout_s: float = 120.0


def requests(texts: list[str], count: int, documents: int) -> list[tuple[str, list[str]]]:
    """`count` (query, documents) requests: each query a short corpus line, its documents the next `documents` corpus
    lines after the previous request's (every line, of 3 to ~400 tokens, in turn)."""
    queries = [t for t in texts if QUERY_WORDS[0] <= len(t.split()) <= QUERY_WORDS[1]]
    if not queries or len(texts) < documents:
        raise TritonizeError(f"the corpus holds {len(texts)} texts: too few for {documents} documents per query")
    return [(queries[i % len(queries)], [texts[(i * documents + k) % len(texts)] for k in range(documents)])
            for i in range(count)]


class ApiPost(load._Http):
    """One JSON body per row, posted to one route of the API."""

    def __init__(self, url: str, timeout_s: float):
        super().__init__(timeout_s)
        self.url = url

    async def send(self, row: tuple[str, ...]) -> None:
        await self._post(self.url, row[0].encode("utf-8"), load.JSON_HEADERS)


@dataclass(frozen=True)
class Measurement:
    """One route measured for one model: a JSON body per request."""

    what: str
    path: str
    bodies: list[str]


def measurements(model: str, routes, pairs: list[tuple[str, list[str]]]) -> list[Measurement]:
    """What is measured for a model: its rerank, and where its task also serves a vectors route for documents (a
    multi-vector model), the documents' encoding alone."""
    found = [Measurement("rerank", RERANK_PATH, [json.dumps({"model": model, "query": q, "documents": d, "top_n": 10},
                                                            ensure_ascii=False) for q, d in pairs])]
    if routes.document_vectors is not None:
        path, body = routes.document_vectors
        found.append(Measurement("encode documents", path,
                                 [json.dumps(body(model, d), ensure_ascii=False) for _, d in pairs]))
    return found


def maxsim_ms(grpc_url: str, model: str, head, pair: tuple[str, list[str]]) -> float:
    """The median time of the head's MaxSim of one query against the documents, over the vectors the server returns
    for them (what the API computes after the encodings)."""
    from ..client import TextClient

    with TextClient(grpc_url, model, protocol="grpc") as client:
        query = client.multi_vector([pair[0]], form="query")[0]
        documents = [v for i in range(0, len(pair[1]), CLIENT_BATCH)
                     for v in client.multi_vector(pair[1][i : i + CLIENT_BATCH], form="document")]
    times = []
    for _ in range(MAXSIM_ROUNDS):
        start = time.perf_counter()
        head.maxsim(query, documents)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run_bench(o: RerankOptions) -> dict:
    from ..api.child import ApiProcess
    from ..api.task_routes import routes_of
    from ..manifest import read_manifests
    from ..runtime.machine import free_ports

    served = {m.name: m for m in read_manifests(o.repository)}
    rerankers = [name for name, m in served.items() if RERANK_PATH in routes_of(m.model.head).paths]
    models = o.models or rerankers
    unknown = [name for name in models if name not in rerankers]
    if unknown:
        raise TritonizeError(f"{', '.join(unknown)}: not a model of {o.repository} that {RERANK_PATH} serves",
                             hint=f"it serves: {', '.join(rerankers) or 'none'}")
    pairs = requests(corpus.read_corpus(), o.queries, o.documents)
    bench = BenchOptions(repository=o.repository, http_url=o.http_url, grpc_url=o.grpc_url, start_local=o.start_local,
                         output=o.output, variant=o.variant)
    rows: list[dict] = []
    with triton_endpoints(bench) as (http_url, grpc_url, _, _), contextlib.ExitStack() as stack:
        (port,) = free_ports(1)
        work = Path(o.output) / ".run"
        work.mkdir(parents=True, exist_ok=True)
        api_url = stack.enter_context(ApiProcess(o.repository, grpc_url, http_url, port=port,
                                                      log_file=work / "api.log"))
        for name in models:
            head = served[name].model.head
            for m in measurements(name, routes_of(head), pairs):
                for c in o.concurrency:
                    err.print(f"[dim]{name}: {m.what}, {o.documents} documents per request, concurrency {c}[/]")
                    result = load.measure(lambda m=m: ApiPost(api_url + m.path, o.timeout_s), [(b,) for b in m.bodies],
                                          c, load.Bound(requests=len(m.bodies), warmup=o.warmup))
                    if result.errors:
                        raise TritonizeError(f"{name}'s {m.path} failed {result.errors} of {len(m.bodies)} requests: "
                                             f"{result.error_samples[0]}")
                    summary = result.summary()
                    rows.append({"model": name, "task": head.task, "what": m.what, "route": m.path, "concurrency": c,
                                 "p50_ms": summary["latency_ms"]["p50"], "p95_ms": summary["latency_ms"]["p95"],
                                 "documents_per_s": round(summary["throughput_rps"] * o.documents, 1)})
            if hasattr(head, "maxsim"):
                rows.append({"model": name, "task": head.task, "what": "MaxSim alone (in process)", "route": "",
                             "concurrency": 1, "p50_ms": round(maxsim_ms(grpc_url, name, head, pairs[0]), 3),
                             "p95_ms": None, "documents_per_s": None})
    return {"documents": o.documents, "queries": o.queries, "variant": o.variant if o.start_local else "as served",
            "rows": rows}


def print_table(document: dict) -> None:
    out.print("| model | task | measured | concurrency | p50 ms | p95 ms | documents/s |", soft_wrap=True)
    out.print("|---|---|---|---|---|---|---|")
    for r in document["rows"]:
        cells = [r["model"], r["task"], f"{r['what']} {r['route']}".strip(), r["concurrency"], r["p50_ms"],
                 r["p95_ms"] if r["p95_ms"] is not None else "", r["documents_per_s"] or ""]
        out.print("| " + " | ".join(str(c) for c in cells) + " |", soft_wrap=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench-rerank", help="rerank N documents per query through the API, model beside model")
    d = RerankOptions(repository=Path("."), models=[])
    p.add_argument("--repository", "-r", type=Path, default=Path("triton_repo"))
    p.add_argument("--models", default="", help="comma-separated (default: every model /v1/rerank serves)")
    p.add_argument("--documents", type=int, default=d.documents, help="documents per query (default: %(default)s)")
    p.add_argument("--queries", type=int, default=d.queries, help="requests per measurement (default: %(default)s)")
    p.add_argument("--concurrency", type=int_list, default=d.concurrency, help="comma-separated (default: 1)")
    p.add_argument("--warmup", type=int, default=d.warmup, help="unrecorded requests first (default: %(default)s)")
    p.add_argument("--url", default=d.http_url, help="Triton's HTTP endpoint")
    p.add_argument("--grpc-url", default=d.grpc_url, help="Triton's gRPC endpoint")
    p.add_argument("--start-local", action="store_true", help="start a local Triton on free ports, stop it after")
    p.add_argument("--variant", choices=tuple(VARIANT_CONFIGS), default=DEFAULT_VARIANT,
                   help="what --start-local's server serves (default: %(default)s)")
    p.add_argument("--output", "-o", type=Path, default=d.output, help=f"folder for {JSON_NAME}")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.documents < 1 or args.queries < 1:
        raise TritonizeError("--documents and --queries must be at least 1")
    options = RerankOptions(repository=args.repository, models=[m for m in args.models.split(",") if m],
                            documents=args.documents, queries=args.queries, concurrency=args.concurrency,
                            warmup=args.warmup, start_local=args.start_local, http_url=args.url,
                            grpc_url=args.grpc_url, variant=args.variant, output=args.output)
    document = run_bench(options)
    path = Path(options.output) / JSON_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    print_table(document)
    err.print(f"[green]✓[/] wrote {path}")
    return 0

