"""`tritonize runtimes`: the model step's graph under onnxruntime and under OpenVINO, in this process.

Answers one question before a runtime is offered: on this CPU, with the same ONNX file (fp32, int8),
does another runtime compute the model step faster than onnxruntime? Both run the same rows, tokenized
by the repository's own tokenizer step, with every core, one after the other, repeated in alternation so
a drifting machine weighs on both; the answers are compared too (a faster wrong answer is no answer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..console import out
from ..errors import TritonizeError
from ..spec import MODEL_FILE
from . import corpus

SHAPES = {"short, batch 1": (16, 1), "short, batch 16": (16, 16), "long, batch 8": (128, 8)}  # (tokens, rows) per batch
ROUNDS = 5


@dataclass
class Measured:
    graph: str
    runtime: str
    shape: str
    ms_per_batch: float
    ms_per_row: float
    max_abs_vs_onnxruntime: float


def shape_feeds(repository: Path, name: str | None = None) -> dict[str, dict[str, np.ndarray]]:
    """For each shape, `rows` distinct corpus texts of exactly `tokens` tokens, as the tokenizer step hands them to
    the model step; every graph runs the same feeds."""
    from ..chain import text_encoder
    from ..manifest import read_manifest

    encoder = text_encoder(repository, name)
    max_length = read_manifest(repository, name).model.max_length  # "long" is the max length where that is shorter
    words = " ".join(corpus.read_corpus()).split()

    def count(text: str) -> int:
        return int(encoder.encode([text], width=0)["attention_mask"].sum())

    return {shape: encoder.encode(corpus.exact_length_texts(words, min(tokens, max_length), rows, count), width=0)
            for shape, (tokens, rows) in SHAPES.items()}


def onnxruntime_session(path: Path, threads: int) -> Callable[[dict], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda feeds: session.run(None, {n: feeds[n] for n in names})[0]


def openvino_session(path: Path, threads: int) -> Callable[[dict], np.ndarray]:
    try:
        import openvino as ov
    except ImportError:
        raise TritonizeError("OpenVINO is not installed", hint="pip install openvino") from None
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU",
                                  {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    names = [i.get_any_name() for i in compiled.inputs]
    return lambda feeds: np.asarray(request.infer({n: feeds[n] for n in names})[compiled.outputs[0]])


RUNTIMES = {"onnxruntime": onnxruntime_session, "openvino": openvino_session}


def time_it(run: Callable[[dict], np.ndarray], feeds: dict, seconds: float) -> list[float]:
    for _ in range(3):
        run(feeds)
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 5:
        t = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - t)
    return times


def measure(graphs: dict[str, Path], repository: Path, threads: int, seconds: float,
            name: str | None = None) -> list[Measured]:
    found: list[Measured] = []
    feeds_by_shape = shape_feeds(repository, name)
    for graph, path in graphs.items():
        sessions = {name: make(path, threads) for name, make in RUNTIMES.items()}
        for shape, (_, rows) in SHAPES.items():
            feeds = feeds_by_shape[shape]
            answers = {name: run(feeds) for name, run in sessions.items()}
            samples: dict[str, list[float]] = {name: [] for name in sessions}
            for _ in range(ROUNDS):  # alternate, so both see the same machine
                for name, run in sessions.items():
                    samples[name] += time_it(run, feeds, seconds / ROUNDS)
            for name in sessions:
                ms = statistics.median(samples[name]) * 1000
                diff = float(np.max(np.abs(answers[name] - answers["onnxruntime"])))
                found.append(Measured(graph, name, shape, round(ms, 3), round(ms / rows, 3), diff))
    return found


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runtimes", help="the model step's ONNX under onnxruntime and OpenVINO, in-process, side by side")
    p.add_argument("--repository", "-r", type=Path, action="append", required=True,
                   help="a repository whose model step to measure; repeat for more graphs (fp32, int8)")
    p.add_argument("--model", default=None, help="the model of each repository, where one holds several")
    p.add_argument("--threads", type=int, default=0, help="threads per runtime (default: every core)")
    p.add_argument("--seconds", type=float, default=4.0, help="timed seconds per runtime and shape")
    p.add_argument("--output", "-o", type=Path, default=Path("bench_results"), help="folder for runtimes.json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    from ..manifest import read_manifest
    from ..spec import repo_paths

    graphs = {}
    for repo in args.repository:
        manifest = read_manifest(repo, args.model)
        graphs[f"{manifest.name} ({manifest.options.precision})"] = repo_paths(repo, manifest.name)["model"] / str(manifest.version) / MODEL_FILE
    threads = args.threads or os.cpu_count() or 1
    rows = measure(graphs, args.repository[0], threads, args.seconds, args.model)
    out.print(f"Model step in-process, {threads} thread(s), median ms per batch (per row); OpenVINO / onnxruntime speed")
    by = {(m.graph, m.shape, m.runtime): m for m in rows}
    for graph in graphs:
        for shape in SHAPES:
            ort_, ov = by[(graph, shape, "onnxruntime")], by[(graph, shape, "openvino")]
            out.print(f"  {graph:<24} {shape:<16} onnxruntime {ort_.ms_per_batch:8.2f} ({ort_.ms_per_row:.2f})   "
                      f"openvino {ov.ms_per_batch:8.2f} ({ov.ms_per_row:.2f})   x{ort_.ms_per_batch / ov.ms_per_batch:.2f}"
                      f"   max-abs {ov.max_abs_vs_onnxruntime:.1e}")
    args.output.mkdir(parents=True, exist_ok=True)
    import onnxruntime

    try:
        import openvino

        ov_version = openvino.__version__
    except ImportError:
        ov_version = None
    (args.output / "runtimes.json").write_text(json.dumps(
        {"threads": threads, "onnxruntime": onnxruntime.__version__, "openvino": ov_version,
         "rows": [asdict(m) for m in rows]}, indent=2))
    out.print(f"wrote {args.output / 'runtimes.json'}")
    return 0
