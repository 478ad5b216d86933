"""`tritonize bench`: Triton against the Hugging Face doc server, Infinity and the in-process floor, in one run.

    tritonize bench --repository triton_repo --start-local
    tritonize bench --repository triton_repo --url 127.0.0.1:8000 --grpc-url 127.0.0.1:8001 --requests 500
    tritonize bench --repository triton_repo --stand-in
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..flags import options_from
from ..console import err, out
from ..errors import TritonizeError
from ..spec import DEFAULT_VARIANT, PRODUCTION_VARIANT, VARIANT_CONFIGS
from . import corpus, infinity, stand_in
from .options import ALL_PEERS, DEFAULT_CONCURRENCY, DEFAULT_PROTOCOLS, BenchOptions
from .runner import Bench, is_triton

PEER_CHOICES = ALL_PEERS
# api: `tritonize api`'s /v1/embeddings in front of the same server (embedders); api-uncoalesced: the same with
# --no-coalesce, each request sent to Triton alone; api-grpc: the same with its inferences over gRPC; front: Triton's
# HTTP requests sent to the API's /v2 routes
PROTOCOLS = ("grpc", "http", "api", "api-uncoalesced", "api-grpc", "front")
JSON_NAME, CHART_NAME = "bench.json", "bench.png"


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers of 1 or more, got {text!r}")
    return values


def choice_list(choices: tuple[str, ...], allow_none: bool = False):
    def parse(text: str) -> list[str]:
        values = [x.strip() for x in text.split(",") if x.strip()]
        if allow_none and values == ["none"]:
            return []
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)} (got {text!r})")
        return values

    return parse


MODEL_HELP = "the model to measure, where the repository holds several (default: its only model)"


def add_target_arguments(p: argparse.ArgumentParser, duration_s: float, workloads: list[str],
                         model_help: str = MODEL_HELP) -> None:
    """Which repository, which texts and how long to measure: shared by bench and tune."""
    d = BenchOptions(repository=Path("."))
    p.add_argument("--repository", "-r", type=Path, default=Path("triton_repo"),
                   help="the generated repository: names, tokenizer and the floor's graph (default: %(default)s)")
    p.add_argument("--model", default="", help=model_help)
    bound = p.add_mutually_exclusive_group()
    bound.add_argument("--duration", type=float, default=None, help=f"seconds per measurement (default: {duration_s:g})")
    bound.add_argument("--requests", type=int, default=None, help="requests per measurement, instead of a duration")
    p.add_argument("--warmup", type=int, default=None, help="unrecorded requests before each measurement (default: 2 x concurrency, at least 10)")
    p.add_argument("--workloads", type=choice_list(corpus.WORKLOADS), default=list(workloads),
                   help=f"short (16 tokens), long (128 tokens), mixed (the shipped corpus), images ({corpus.IMAGE_SIDE}x"
                        f"{corpus.IMAGE_SIDE} JPEG files, one a request, over gRPC: a model whose ensemble takes images) "
                        f"(default: {','.join(workloads)})")
    p.add_argument("--corpus", type=Path, default=None, help="mixed workload file, one text per line (default: the shipped corpus)")
    p.add_argument("--short-tokens", type=int, default=d.short_tokens)
    p.add_argument("--long-tokens", type=int, default=d.long_tokens)
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="seconds before one request counts as an error")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure Triton against a Starlette server, Infinity and the in-process floor")
    d = BenchOptions(repository=Path("."))
    add_target_arguments(p, d.duration_s, d.workloads, MODEL_HELP + "; for a repository of one model, the name "
                         "the server serves it under, where that differs")
    p.add_argument("--url", default="127.0.0.1:8000", help="Triton's HTTP endpoint (also read for statistics)")
    p.add_argument("--grpc-url", default="127.0.0.1:8001", help="Triton's gRPC endpoint")
    p.add_argument("--metrics-url", default="127.0.0.1:8002", help="Triton's metrics endpoint (the served steps' counters)")
    p.add_argument("--start-local", action="store_true", help="start a local Triton on free ports for this run, and stop it after")
    p.add_argument("--concurrency", type=int_list, default=None,
                   help=f"comma-separated (default: {','.join(map(str, DEFAULT_CONCURRENCY))}; with --stand-in "
                        f"{','.join(map(str, stand_in.CONCURRENCY))})")
    p.add_argument("--protocols", type=choice_list(PROTOCOLS), default=None,
                   help=f"grpc,http,api,api-uncoalesced,api-grpc,front (default: {','.join(DEFAULT_PROTOCOLS)}; with "
                        f"--stand-in {','.join(stand_in.PROTOCOLS)}, api where the model is an embedder); api starts "
                        "`tritonize api` in front of the server, its inferences to Triton's HTTP port (api-grpc: over "
                        "gRPC), embedding models only; front sends http's requests to its /v2 routes")
    p.add_argument("--stand-in", action="store_true",
                   help="the host CPU around the model: serve the repository's production variant on a local server "
                        "with the model step's graph replaced by a stand-in of the same inputs and outputs that "
                        "costs next to nothing, then an empty ensemble (what Triton itself costs); report CPU "
                        "per request and per row by process, and the host cores one H100 needs to be fed")
    p.add_argument("--texts-per-request", type=int_list, default=None,
                   help=f"texts in each request to Triton and the API, each size measured in turn (an indexer "
                        f"sends 64); the peers are sent one (default: 1; with --stand-in "
                        f"{','.join(map(str, stand_in.TEXTS_PER_REQUEST))})")
    p.add_argument("--peers", "--baselines", dest="peers", type=choice_list(PEER_CHOICES, allow_none=True), default=None,
                   help=f"the servers compared against: {','.join(PEER_CHOICES)} or none (default: all; Infinity's "
                        "only where it is installed); --baselines is a deprecated alias")
    p.add_argument("--infinity-python", default=None,
                   help=f"the interpreter of Infinity's virtualenv (default: {infinity.venv_python(infinity.VENV)}; "
                        f"install: {infinity.INSTALL_HINT})")
    p.add_argument("--compare", type=Path, action="append", default=[], metavar="REPOSITORY",
                   help="another repository of the same task to measure in this run, on its own local server "
                        "(e.g. the int8 one beside fp32); repeatable")
    p.add_argument("--variant", choices=tuple(VARIANT_CONFIGS), default=None,
                   help="what --start-local's server serves: production (config.pbtxt, the native onnxruntime "
                        f"backend) or fused (configs/fused.pbtxt) (default: {DEFAULT_VARIANT}; with --stand-in "
                        f"{PRODUCTION_VARIANT}, the only one it measures)")
    p.add_argument("--compare-variant", choices=tuple(VARIANT_CONFIGS), action="append", default=[],
                   dest="compare_variants", metavar="VARIANT",
                   help="the same repository serving another variant, measured in this run on its own local server")
    p.add_argument("--source-model", default=None, help="model folder the peers load (default: tritonize.yaml's model)")
    p.add_argument("--output", "-o", type=Path, default=Path("bench_results"), help="folder for bench.json and bench.png")
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    if args.requests is not None and args.requests < 1:
        raise TritonizeError("--requests must be at least 1")
    if args.duration is not None and args.duration <= 0:
        raise TritonizeError("--duration must be positive")
    stand = args.stand_in
    return options_from(
        BenchOptions, args,
        renamed={"http_url": "url", "corpus_file": "corpus", "timeout_s": "timeout"},
        start_local=args.start_local or stand,
        concurrency=args.concurrency or list(stand_in.CONCURRENCY if stand else DEFAULT_CONCURRENCY),
        protocols=args.protocols or list(stand_in.PROTOCOLS if stand else DEFAULT_PROTOCOLS),
        protocols_asked=args.protocols is not None,
        peers=([] if stand else list(PEER_CHOICES)) if args.peers is None else args.peers,
        peers_asked=args.peers is not None,
        duration_s=None if args.requests else (args.duration or BenchOptions.duration_s),
        variant=args.variant or (PRODUCTION_VARIANT if stand else DEFAULT_VARIANT),
        texts_per_request=args.texts_per_request or list(stand_in.TEXTS_PER_REQUEST if stand else [1]),
    )


def run(args: argparse.Namespace) -> int:
    from . import report

    options = options_from_args(args)
    document = stand_in.run(options) if options.stand_in else Bench(options).run()
    json_path = report.write_json(document, Path(options.output) / JSON_NAME)
    chart_path = report.write_chart(document, Path(options.output) / CHART_NAME)
    report.print_tables(document, out)
    err.print(f"[green]✓[/] wrote {json_path} and {chart_path}")
    failed = False
    for system, by_workload in document.get("checks", {}).items():
        differ = "; ".join(f"{w}: {c['first_mismatch']}" for w, c in by_workload.items() if not c["passed"])
        if differ and is_triton(system):
            err.print(f"[red]✗[/] {report.label_of(system)}'s answers differ from the floor's (the repository's own steps "
                      f"in-process): {differ}")
            failed = True
        elif differ:
            err.print(f"[yellow]![/] {report.label_of(system)}'s answers differ from the floor's, so its figures "
                      f"are not for the same answers: {differ}")
    return 1 if failed else 0
