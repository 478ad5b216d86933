"""The in-process floor: the served steps, called directly, no server.

The floor runs what the repository serves, chained as the ensemble chains
them (`chain.in_process`): the tokenizer, the ONNX graph and the task's post
step, or a question-answering context's every window and its decoding, so
it computes the whole answer, never a part of it.

Batch-1 latency is what one request costs with nothing in between (one
session, onnxruntime threads on every core, as the server configures it).

Best-batch throughput uses every core in the better of two layouts: one
session with a thread per core, or one single-threaded session per core fed
by its own thread. It is measured in arrival order, each batch padded to
its longest row, and in batches of rows sorted by length. The sorted figure
needs the whole workload in advance, so no server can reach it: it is the
machine's limit for this model and workload. On mixed lengths a third order,
`regrouped`, takes batches in arrival order and runs each as the served
model step does (its rows regrouped by length, each group padded to its own
longest row): the most a server that batches what arrives can get from a
batch of that size, so the floor's own concurrency-4-over-1 ratio is read
from it (`scaling_ceiling`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import chain
from .corpus import Row

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
MIN_POINT_S = 1.5  # shortest measurement of one (batch size, layout) point


@dataclass
class Throughput:
    """Rows per second for each batch size, in one order."""

    order: str  # arrival | sorted | regrouped
    by_batch: dict[int, float] = field(default_factory=dict)
    waste_by_batch: dict[int, float] = field(default_factory=dict)
    layout_by_batch: dict[int, str] = field(default_factory=dict)  # sessions x threads, e.g. "2x1"
    # CPU this process spent per row at each batch size's best point (every thread: sessions, tokenizer, feeder).
    cpu_ms_by_batch: dict[int, float] = field(default_factory=dict)
    best_by_layout: dict[str, float] = field(default_factory=dict)  # best rows/s of each layout
    by_layout: dict[str, dict[int, float]] = field(default_factory=dict)  # rows/s of every (layout, batch size)

    @property
    def best_batch(self) -> int:
        return max(self.by_batch, key=self.by_batch.get)

    def to_dict(self) -> dict:
        best = self.best_batch
        return {
            "order": self.order,
            "best_batch": best,
            "rps": round(self.by_batch[best], 2),
            "layout": self.layout_by_batch[best],
            "cpu_ms_per_row": round(self.cpu_ms_by_batch[best], 3),
            "padding_waste": self.waste_by_batch[best],
            "by_batch": {str(b): round(v, 2) for b, v in self.by_batch.items()},
            "layout_by_batch": {str(b): v for b, v in self.layout_by_batch.items()},
            "best_by_layout": {k: round(v, 2) for k, v in self.best_by_layout.items()},
            "by_layout": {k: {str(b): round(v, 2) for b, v in rates.items()} for k, rates in self.by_layout.items()},
            "padding_waste_by_batch": {str(b): w for b, w in self.waste_by_batch.items()},
        }


@dataclass
class _Tally:
    rows: int = 0
    real: int = 0
    computed: int = 0
    elapsed: float = 0.0
    cpu_s: float = 0.0


class Floor:
    """A model's own served steps (the repository's only model, or `name`), loaded once."""

    def __init__(self, repository: Path, threads: int = 0, name: str | None = None):
        self.repository = Path(repository)
        self.name = name
        self.threads = threads or (os.cpu_count() or 1)
        self.chain = chain.in_process(repository, intra_op_threads=self.threads, name=name)
        self.count = self.chain.count
        self.runner = self.chain.runner
        self._single: list = []  # single-threaded sessions, made on first use
        self._wide = None  # one session on every core that regroups every batch (the regrouped order's 1xN)

    def layouts(self) -> list[tuple[int, int]]:
        """(sessions, threads per session) that use every core."""
        return [(1, self.threads)] + ([(self.threads, 1)] if self.threads > 1 else [])

    def _runners(self, sessions: int, threads: int, warm: Row, regroup: bool = False) -> list:
        if sessions == 1 and not regroup:
            return [self.runner]
        if sessions == 1:  # the configured runner would send a batch to its shards, not to every core
            if self._wide is None:
                self._wide = chain.onnx_runner(self.repository, intra_op_threads=threads, shards=0, name=self.name)
                self._batch(self._wide, [warm])
            return [self._wide]
        while len(self._single) < sessions:
            runner = chain.onnx_runner(self.repository, intra_op_threads=1, shards=0, name=self.name)  # run() only
            self._batch(runner, [warm])
            self._single.append(runner)
        return self._single[:sessions]

    def one(self, row: Row) -> chain.Answer:
        """What the server computes for one request: the whole answer, bucketed and regrouped as served."""
        return self.chain([row])

    def batch1_latency(self, rows: list[Row], requests: int | None, duration_s: float | None, warmup: int = 10) -> list[float]:
        for i in range(warmup):
            self.one(rows[i % len(rows)])
        lat: list[float] = []
        deadline = time.perf_counter() + duration_s if duration_s else None
        i = 0
        while (requests is None or i < requests) and (deadline is None or time.perf_counter() < deadline):
            start = time.perf_counter()
            self.one(rows[i % len(rows)])
            lat.append((time.perf_counter() - start) * 1e3)
            i += 1
        return lat

    def image_split(self, rows: list[Row], requests: int | None, duration_s: float | None, warmup: int = 3) -> dict:
        """One image at a time on one thread, in this process: the first step's work (decoding and preprocessing,
        `encode_images`) against the model step's (the graph on those pixels: the vision tower), image after image,
        so both see the same machine. Which of the two bounds the served images, with no server around them."""
        runner = chain.onnx_runner(self.repository, intra_op_threads=1, shards=0, name=self.name)
        encoder = self.chain.encoder
        first: list[float] = []
        model: list[float] = []

        def one(data: bytes) -> tuple[float, float]:
            start = time.perf_counter()
            feeds = encoder.encode_images([data])
            prepared = time.perf_counter()
            runner.run({n: feeds[n] for n in runner.input_names})
            return (prepared - start) * 1e3, (time.perf_counter() - prepared) * 1e3

        for i in range(warmup):
            one(rows[i % len(rows)][0])
        deadline = time.perf_counter() + duration_s if duration_s else None
        i = 0
        while (requests is None or i < requests) and (deadline is None or time.perf_counter() < deadline):
            a, b = one(rows[i % len(rows)][0])
            first.append(a)
            model.append(b)
            i += 1
        return {"threads": 1, "first_ms": latency_summary(first), "model_ms": latency_summary(model)}

    def _batch(self, runner, chunk: list[Row], regroup: bool = False) -> tuple[int, int]:
        """One batch padded to its longest row (or regrouped as served), answered whole; (computed tokens, real tokens)."""
        answer = self.chain(chunk, runner=runner, pad_to_longest=not regroup)
        return answer.padded_tokens, answer.real_tokens

    def _rate(self, chunks: list[list[Row]], runners: list, budget_s: float | None, max_rows: int | None,
              regroup: bool = False) -> _Tally:
        """Feed shuffled chunks to every runner from its own thread until the bound; what got done."""
        visit = np.random.default_rng(0).permutation(len(chunks))
        lock, tally, state = threading.Lock(), _Tally(), {"next": 0, "stop": False}
        start, cpu0 = time.perf_counter(), time.process_time()

        def work(runner) -> None:
            while True:
                with lock:
                    k = state["next"]
                    if state["stop"] or k >= len(visit) or (max_rows is not None and tally.rows >= max_rows):
                        return
                    state["next"] = k + 1
                chunk = chunks[visit[k]]
                computed, real = self._batch(runner, chunk, regroup)
                with lock:
                    tally.rows, tally.real, tally.computed = tally.rows + len(chunk), tally.real + real, tally.computed + computed
                    if budget_s is not None and time.perf_counter() - start >= budget_s:
                        state["stop"] = True

        workers = [threading.Thread(target=work, args=(r,)) for r in runners]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        tally.elapsed, tally.cpu_s = time.perf_counter() - start, time.process_time() - cpu0
        return tally

    def throughput(
        self,
        rows: list[Row],
        order: str,
        batches: tuple[int, ...] = DEFAULT_BATCHES,
        budget_s: float | None = None,
        max_rows: int | None = None,
    ) -> Throughput:
        """Rows per second per batch size (best layout), tokenization and post-processing included.

        Each point runs until `budget_s` or `max_rows` (or every row once).
        Batches (consecutive rows in the given order) are visited in a fixed
        shuffled order, and the rate is real tokens per second over the
        workload's mean tokens per row, so a partial pass of a mixed-length
        workload counts long and short rows at their true weight.
        """
        counts = [self.count(r) for r in rows]
        if order == "sorted":
            rows = [r for _, r in sorted(zip(counts, rows), key=lambda p: p[0])]
        mean_tokens = sum(counts) / len(counts)
        result = Throughput(order)
        for b in batches:
            chunks = [rows[i : i + b] for i in range(0, len(rows), b)]
            for sessions, threads in self.layouts():
                regroup = order == "regrouped"
                tally = self._rate(chunks, self._runners(sessions, threads, rows[0], regroup), budget_s, max_rows, regroup)
                rps = tally.real / tally.elapsed / mean_tokens
                layout = f"{sessions}x{threads}"
                result.best_by_layout[layout] = max(rps, result.best_by_layout.get(layout, 0.0))
                result.by_layout.setdefault(layout, {})[b] = rps
                if rps > result.by_batch.get(b, 0.0):
                    result.by_batch[b] = rps
                    result.layout_by_batch[b] = layout
                    result.waste_by_batch[b] = round((tally.computed - tally.real) / tally.real, 4)
                    result.cpu_ms_by_batch[b] = 1e3 * tally.cpu_s * mean_tokens / tally.real
        return result


def latency_summary(lat: list[float]) -> dict:
    a = np.asarray(lat)
    return {
        "requests": int(a.size),
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
        "mean": round(float(a.mean()), 3),
    }


def measure(
    floor: Floor,
    rows: list[Row],
    requests: int | None,
    duration_s: float | None,
    fixed_length: bool,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    batch1: list[float] | None = None,
    ceilings: tuple[int, ...] = (),
) -> dict:
    """Batch-1 latency and best-batch throughput for one workload, within the run's bound.

    With a duration, each (batch size, layout) point gets an equal share of
    it, at least MIN_POINT_S; with a request count, each point processes that
    many rows. `batch1`: latencies already measured (the bench takes them
    beside Triton's own concurrency-1 run). `ceilings`: the concurrencies
    whose ratio over concurrency 1 to bound (`scaling_ceiling`).
    """
    lat = batch1 if batch1 else floor.batch1_latency(rows, requests, duration_s)
    points = len(batches) * len(floor.layouts())
    budget = max(MIN_POINT_S, duration_s / points) if duration_s else None
    arrival = floor.throughput(rows, "arrival", batches, budget, requests)
    # Rows of one length gain nothing from sorting, nor from regrouping.
    ordered = arrival if fixed_length else floor.throughput(rows, "sorted", batches, budget, requests)
    regrouped = arrival if fixed_length else floor.throughput(rows, "regrouped", batches, budget, requests)
    batch1 = latency_summary(lat)
    result = {
        "threads": floor.threads,
        "batch1_latency_ms": batch1,
        "arrival": arrival.to_dict(),
        "sorted": {**ordered.to_dict(), "order": "sorted"},
        "scaling_ceiling": {str(c): scaling_ceiling(regrouped, batch1["mean"], c) for c in ceilings},
    }
    if not fixed_length:
        result["regrouped"] = regrouped.to_dict()
    return result


def scaling_ceiling(t: Throughput, batch1_mean_ms: float, in_flight: int) -> float | None:
    """The floor's own ratio of `in_flight` requests at a time over one: its best rate with at most that many rows
    in flight (batch size x sessions, in arrival order, regrouped as served), over one request at a time on every
    core. A server's ratio can pass it only where its concurrency-1 figure falls short of the floor's."""
    rates = [rps for layout, by_batch in t.by_layout.items() for b, rps in by_batch.items()
             if b * int(layout.split("x")[0]) <= in_flight]
    return round(max(rates) * batch1_mean_ms / 1e3, 3) if rates and batch1_mean_ms else None
