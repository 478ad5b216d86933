"""The fused step: the tokenizer step and the model step as one Python model, raw strings in, the graph's outputs out.

Served: Triton runs a byte-identical copy of this file as the model step's
model.py in the fused variant (`configs/fused.pbtxt`, which the ensemble's
own fused config calls instead of the two steps). Two Python steps cost a
batch two shared-memory hand-offs, two scheduler queues and two stubs
competing for the cores; one step costs one of each, and its answers are
the two steps' answers exactly: the same TextEncoder pads each request to
its bucket, and the same OnnxRunner regroups the rows by length. In the
container the two steps stay two, the graph on Triton's onnxruntime backend.

The step pipelines: execute() tokenizes its requests and hands them to a
worker thread, which answers them through their response senders, so Triton
hands the step its next requests while the graph runs. The worker runs what
was handed over since its last run as one batch, up to the step's
max_batch_size rows; before a run it waits a moment (`gather_us`) for the
clients it has just answered, so a few clients share one run instead of
splitting into two runs that alternate. The step holds its own queue bound,
counted in work (each row's tokens, batching.queue_work) rather than requests
(`BatchWorker`), because Triton's bound would turn off the dynamic batcher's
prefetching and with it the wake-up that Triton 2.51 loses
(docs/benchmark.md, "The 500 ms stalls"). The graph's threads run nicer
than execute(): under overload the cores go first to admitting and
refusing requests, then to the graph. A run that follows the previous one
at once, or gathered, runs on onnxruntime threads that do not spin, so the
previous answers reach their clients meanwhile (`OnnxRunner`'s busy
session).

The step also returns the tokenizer's tensors that the ensemble passes on
(token counts, the truncated flag, a post step's offsets), as the tokenizer
step would have.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .batching import (ATTENTION_MASK, ENCODING_FIELDS, GATHER, QUEUE_BOUND, QUEUE_ROW_TOKENS, ROW_FIELDS, bound_work,
                       queue_work)
from .onnx_model import OnnxRunner
from .tokenizer import RequestEncoder, error_response, parameters
from .stub import ServedStep

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests read `tokenizer_outputs` and run `BatchWorker`
    pb_utils = None


T = TypeVar("T")

# How much nicer the graph's threads run than execute() and Triton's own threads. A refusal needs execute(),
# so under overload the graph, which takes every core it is given, must not starve it. With runs of at most
# max_batch_size rows, refusals at 4 x capacity (p99) fell from 107-152 ms to 38-80 ms on a 2-core machine,
# and beside a busy process from 349-1307 ms to 148-173 ms (docs/benchmark.md, "Under overload"). Alone on
# the machine the graph still gets every idle core; beside other work it yields to that work too.
GRAPH_NICE = 10


def lower_priority(by: int) -> None:
    """This thread `by` steps nicer (at most 19), and so every thread it starts from now on: Linux keeps a
    nice value per thread, and a new thread inherits its creator's."""
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except OSError as exc:  # a priority is a preference: serve at the same priority rather than not at all
        print(f"fused step: the graph's threads keep their priority: {exc}", flush=True)


def built_nicer(build: Callable[[], T], by: int) -> T:
    """build() on a thread `by` steps nicer, so that the threads it starts (onnxruntime's) run nicer too; its
    errors are raised on the caller's thread."""
    with ThreadPoolExecutor(1, thread_name_prefix="fused-step-build", initializer=lower_priority, initargs=(by,)) as once:
        return once.submit(build).result()


def item_rows(item: tuple) -> int:
    """Rows of one handed-over request (its sender, its tensors)."""
    return len(item[1][ATTENTION_MASK])


def tokenizer_outputs(model_config: dict, graph_inputs: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the tokenizer must produce: the graph's inputs and the tokenizer tensors the step declares as
    outputs; those declared outputs, which the step passes on)."""
    declared = [o["name"] for o in model_config["output"]]
    passed = tuple(n for n in declared if n in ENCODING_FIELDS or n in ROW_FIELDS)
    return tuple(dict.fromkeys([*graph_inputs, *passed])), passed


def item_work(item: tuple) -> int:
    """The work one handed-over request (its sender, its tensors) brings to the queue (batching.queue_work)."""
    return queue_work(item[1][ATTENTION_MASK])


def queue_full_message(bound: int, item: tuple | None = None) -> str:
    """What a request refused by the bound is told: Triton's own words for a full queue, the bound in work and
    how texts count, and the refused request's own work where it was read (`item`; one refused before it is
    read found no room for even a short text). A bound counts tokens, not requests: a reader must not take the
    requests waiting, or this one, for short ones."""
    brought = f"'s {item_work(item)} ({item_rows(item)} texts; " if item else " ("
    return (f"Exceeds maximum queue size: the requests waiting for this model hold up to {bound} tokens of work and "
            f"leave no room for this one{brought}each text counts its tokens, at least {QUEUE_ROW_TOKENS}); "
            "try again later")


class BatchWorker:
    """Requests handed over by execute(), run by one worker thread: each run takes what waits, oldest first,
    up to `max_rows` rows (`rows` counts an item's; a larger item runs alone).

    `run(items, busy)` gets busy=True when the items were already waiting as
    the previous run ended (the worker went on without waiting), or arrived
    while it gathered: that run's answers are still on their way.

    With `gather_s`, a run that would take fewer rows than the previous run's
    clients and those already waiting waits until they are there, but not
    past `gather_s` after the previous run ended. In a closed loop (each
    client sends its next request when answered) a few clients otherwise
    split into two halves that alternate, each run half the rows it could
    be; a lone client, or one slower than the window, never waits.

    `bound` caps the work waiting (handed over, not yet taken by a run), as
    `work` counts an item's, at least `least_work`: `offer` hands over, oldest
    first, what fits (one item always fits an empty queue), and execute()
    asks `room` before it decodes anything, so a step that cannot take even
    the least work refuses at the cost of a reply. `run` answers its items
    itself, errors included. The worker runs `nice` steps nicer than the
    thread that made the worker.
    """

    def __init__(self, run: Callable[[list, bool], None], bound: int = 0, max_rows: int = 0,
                 rows: Callable[[object], int] = lambda item: 1, nice: int = 0, gather_s: float = 0.0,
                 name: str = "fused-step-worker", work: Callable[[object], int] = lambda item: 1, least_work: int = 1):
        self.run, self.bound, self.max_rows, self.rows, self.nice = run, bound, max_rows, rows, nice
        self.gather_s, self.work, self.least_work = gather_s, work, least_work
        self._waiting: list = []
        self._works: list[int] = []  # each waiting item's work, counted once as it is offered
        self._pending = 0  # the work of what waits
        self._closed = False
        self._ready = threading.Condition()
        self._worker = threading.Thread(target=self._loop, name=name, daemon=True)
        self._worker.start()

    def room(self, wanted: int) -> int:
        """How many of `wanted` new requests might wait, each bringing the least work."""
        if not self.bound:
            return wanted
        with self._ready:
            least = 1 if not self._waiting else 0  # one request always fits an empty queue
            return max(least, min(wanted, (self.bound - self._pending) // self.least_work))

    def offer(self, items: list) -> int:
        """Hands over, oldest first, the items that fit the bound; how many (the caller refuses the rest)."""
        with self._ready:
            if self._closed:
                raise RuntimeError("the step is unloading")
            taken = 0
            for item in items:
                work = self.work(item)
                if self.bound and self._waiting and self._pending + work > self.bound:
                    break
                self._waiting.append(item)
                self._works.append(work)
                self._pending += work
                taken += 1
            if taken:
                self._ready.notify()
            return taken

    def _take(self) -> list:
        """The oldest items waiting, up to `max_rows` rows (at least one item)."""
        taken = len(self._waiting)
        if self.max_rows:
            taken, total = 0, 0
            for item in self._waiting:
                total += self.rows(item)
                if taken and total > self.max_rows:
                    break
                taken += 1
        items, self._waiting = self._waiting[:taken], self._waiting[taken:]
        self._pending -= sum(self._works[:taken])
        del self._works[:taken]
        return items

    def _gather(self, last: int, busy: bool, ended: float) -> bool:
        """With the lock held: wait until the rows waiting reach the last run's `last` rows (plus those that
        were waiting as it ended, when `busy`), up to max_rows, or until `gather_s` after it `ended`; whether
        it waited."""
        if not (self.gather_s and self.max_rows and last):
            return False
        have = sum(map(self.rows, self._waiting))
        expected = min(self.max_rows, last + (have if busy else 0))
        waited = False
        while have < expected and not self._closed:
            left = ended + self.gather_s - time.monotonic()
            if left <= 0:
                break
            self._ready.wait(left)
            waited = True
            have = sum(map(self.rows, self._waiting))
        return waited

    def _loop(self) -> None:
        if self.nice:
            lower_priority(self.nice)
        last, ended = 0, 0.0  # the previous run's rows, and when it ended
        while True:
            with self._ready:
                busy = bool(last and self._waiting)  # no wait since the last run: its answers are on their way
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if not self._waiting:
                    return
                # A run that gathered is busy too: without spinning, the clients it waited for finish sending
                # (16 tokens at concurrency 4, p99 1.7-1.8 x p50 against 2.1-2.2 spinning).
                busy = self._gather(last, busy, ended) or busy
                items = self._take()
            try:
                self.run(items, busy)
            except Exception:  # noqa: BLE001 - `run` answers its items; the worker must outlive any one batch
                traceback.print_exc()
            last, ended = sum(map(self.rows, items)), time.monotonic()

    def close(self, timeout_s: float = 30.0) -> list:
        """Stop taking requests; let the worker finish what waits; what it could not reach (returned) the
        caller answers."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._worker.join(timeout_s)
        with self._ready:
            left, self._waiting, self._works, self._pending = self._waiting, [], [], 0
        return left


class TritonPythonModel(ServedStep):
    """Tokenizes each request as the tokenizer step would, runs the batch as the model step would."""

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        # Built on a nicer thread: onnxruntime's threads run at the worker's priority, not at execute()'s.
        self.runner = built_nicer(lambda: OnnxRunner.from_config(config, version_dir, busy_session=True), GRAPH_NICE)
        produced, self.passed = tokenizer_outputs(config, self.runner.input_names)
        self.front = RequestEncoder(config, version_dir, produced)
        self.statistics = self.front.statistics  # the tokens, and here what the graph answers
        if self.statistics is not None:
            self.statistics.start(self.runner.output_names)
        self.final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        params = parameters(config)
        self.worker = BatchWorker(self._run, bound_work(int(params.get(QUEUE_BOUND, "0"))),
                                 max_rows=int(config["max_batch_size"]), rows=item_rows, work=item_work,
                                 least_work=QUEUE_ROW_TOKENS, nice=GRAPH_NICE,
                                 gather_s=int(params.get(GATHER, "0")) / 1e6)

    def execute(self, requests):
        room = self.worker.room(len(requests))
        responses, valid, encoded = self.front.encode(requests[:room])
        items = [(requests[i].get_response_sender(), tensors) for i, tensors in zip(valid, encoded)]
        admitted = self.worker.offer(items)
        refused = len(requests) - room + len(items) - admitted
        if not refused:
            return responses
        self.front.metrics.record({"queue_full": refused})
        for item in items[admitted:]:  # tokenized, then found over the bound: answered through its sender
            self._send(item[0], error_response(queue_full_message(self.worker.bound, item), "UNAVAILABLE"))
        full = queue_full_message(self.worker.bound)
        return responses + [error_response(full, "UNAVAILABLE") for _ in requests[room:]]

    def _run(self, items: list, busy: bool) -> None:
        """One batch of the requests waiting; each answered through its own sender."""
        try:
            results = self.runner.run_grouped([{n: t[n] for n in self.runner.input_names} for _, t in items], busy)
            if self.statistics is not None:
                self.statistics.observe_requests([dict(zip(self.runner.output_names, arrays)) for arrays in results])
            answers = []
            for (_, tensors), arrays in zip(items, results):
                outputs = [pb_utils.Tensor(n, a) for n, a in zip(self.runner.output_names, arrays)]
                outputs += [pb_utils.Tensor(n, tensors[n]) for n in self.passed]
                answers.append(pb_utils.InferenceResponse(output_tensors=outputs))
        except Exception as exc:  # noqa: BLE001 - every request of the batch gets the error, the worker goes on
            answers = [error_response(f"the model step failed: {exc}", "INTERNAL")] * len(items)
        self.front.metrics.record({"runs": 1, "run_texts": sum(map(item_rows, items))})
        for (sender, _), answer in zip(items, answers):
            self._send(sender, answer)

    def _send(self, sender, answer) -> None:
        try:
            sender.send(answer, flags=self.final)
        except Exception as exc:  # noqa: BLE001 - a request cancelled or already answered: the others go on
            pb_utils.Logger.log_warn(f"fused step: an answer could not be sent: {exc}")

    def finalize(self):
        for sender, _ in self.worker.close():
            self._send(sender, error_response("the model is unloading", "UNAVAILABLE"))
        self.front.metrics.close()
