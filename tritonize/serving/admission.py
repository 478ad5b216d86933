"""Admission ahead of the tokenizer: refuse at once what the model step's queue would refuse after its budget.

Served beside the tokenizer step. In the production ensemble the tokenizer step cannot see the model step's
queue: Triton 2.51 gives a step no view of another's. Under overload a request then waits in the tokenizer's
queue, is tokenized, waits the whole budget in the model step's queue and is refused there: its tokenization,
as dear as an answer's, was spent for nothing (docs/reliability.md, "What a refusal costs"). Triton's metrics
port does show that queue (`nv_inference_pending_request_count`) and how fast the model step answers
(`nv_inference_request_success`). While requests come together (an execute() of several, or a queue at the last
read), a thread reads both every POLL_S; the step admits a request while the model step's queue, with what this
step has admitted since, would drain within FILL of the budget, and refuses the rest before tokenizing them.
Triton's own bound stays behind it, unchanged. A lone request reads nothing: one read costs about 0.6 ms of CPU
(the server's and the step's), as much as tokenizing a short text.

Standard library only. The metrics address is read from the server's command line (the stub's parent); where
the server publishes no metrics, or they do not answer, every request is admitted as before.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from collections import deque
from pathlib import Path

# The tokenizer step's parameters (written by the repository's plan where the model step's queue is bounded).
ADMIT_BEHIND = "admit_behind"  # the model step whose queue this step admits for
ADMIT_BUDGET_US = "admit_budget_us"  # that queue's budget: Triton refuses a request that waited longer
ADMIT_BOUND = "admit_bound"  # that queue's bound in requests (Triton's max_queue_size)

POLL_S = 0.1  # how often the metrics are read while requests come together
RATE_WINDOW_S = 2.0  # the model step's answers per second are counted over this long
# ... while its queue held requests at both ends of a read: then it ran as fast as it can, and the rate is its
# capacity (under a lighter load the rate is the load's, and would refuse a burst the step can answer). Under
# this much of such time in the window, the rate is not known, and only Triton's bound admits. Answers come in
# batches (64 rows of 128 tokens take about a second on one core): 0.2 s of reads once measured 5 answers a second
# where the step gave 100, and refused 4 requests of 16 closed-loop clients.
RATE_MIN_S = 1.0
IDLE_S = 1.0  # nothing came together for this long: stop reading the metrics until something does
# Admit while the queue would drain within this share of the budget: what is admitted then waits less than the
# budget, and the queue never runs dry between two reads while the overload lasts (POLL_S << FILL * budget).
FILL = 0.8
DEFAULT_METRICS_PORT = 8002  # Triton's


def metrics_address(cmdline: bytes) -> tuple[str, int] | None:
    """(host, port) of Triton's metrics endpoint from the server's command line (NUL-separated, as /proc holds
    it); None where the server publishes none, or the command is not tritonserver's (a step run outside Triton)."""
    args = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
    if not args or os.path.basename(args[0]) != "tritonserver":
        return None
    flags: dict[str, str] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        key, eq, value = arg[2:].partition("=")
        if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
        flags[key] = value
    if flags.get("allow-metrics", "true").lower() in ("false", "0", "off", "no"):
        return None
    host = flags.get("metrics-address") or flags.get("http-address") or "127.0.0.1"
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return host, int(flags.get("metrics-port") or DEFAULT_METRICS_PORT)


def sample_sum(text: bytes, family: str, model: str) -> float | None:
    """The sum over versions of one model's samples of a metric family in Prometheus text; None where none.
    A scan for two lines, not tritonize.metrics_text's whole parse: it runs ten times a second in the step, and a
    served module imports only its siblings."""
    key = f'\n{family}{{model="{model}",'.encode()
    total, found, at = 0.0, False, text.find(key)
    while at >= 0:
        end = text.find(b"\n", at + 1)
        line = text[at + 1:end if end >= 0 else len(text)]
        total += float(line.rsplit(b" ", 1)[1])
        found = True
        at = text.find(key, at + 1)
    return total if found else None


class QueueView:
    """The model step's queue as Triton's metrics show it, read by a thread while requests come."""

    def __init__(self, host: str, port: int, model: str, budget_s: float, bound: int):
        self.host, self.port, self.model = host, port, model
        self.budget_s, self.bound = budget_s, bound
        self.pending: float | None = None  # requests waiting in the model step's queue, at the last read
        self.admitted = 0  # requests this step admitted since that read
        self._last: tuple[float, float, float] | None = None  # (time, pending, answers so far) of the last read
        self._busy: deque[tuple[float, float, float]] = deque()  # (end, seconds, answers) of reads a queue spanned
        self._last_pressure = 0.0  # when requests last came together (monotonic)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._connection: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name="admission", daemon=True)
        self._thread.start()

    @classmethod
    def of_step(cls, parameters: dict[str, str], cmdline_path: Path | None = None) -> QueueView | None:
        """The view a step's parameters ask for; None where they ask none or the server publishes no metrics."""
        model = parameters.get(ADMIT_BEHIND)
        if not model:
            return None
        path = cmdline_path or Path(f"/proc/{os.getppid()}/cmdline")
        try:
            address = metrics_address(path.read_bytes())
        except OSError:
            return None
        if address is None:
            return None
        return cls(*address, model, int(parameters[ADMIT_BUDGET_US]) / 1e6, int(parameters[ADMIT_BOUND]))

    def rate(self) -> float | None:
        """The model step's answers per second while its queue held requests, over the last RATE_WINDOW_S; None
        where that was under RATE_MIN_S."""
        seconds = sum(b[1] for b in self._busy)
        answers = sum(b[2] for b in self._busy)
        return answers / seconds if seconds >= RATE_MIN_S and answers > 0 else None

    def admit(self, count: int) -> int:
        """How many of `count` requests arriving now to admit (the first ones); counts them as admitted."""
        with self._lock:
            if count > 1 or self.pending:
                self._last_pressure = time.monotonic()
                self._wake.set()
            if self.pending is None:
                return count
            waiting = self.pending + self.admitted
            room = self.bound - waiting
            rate = self.rate()
            if rate is not None:
                room = min(room, FILL * self.budget_s * rate - waiting)
            admitted = max(0, min(count, int(room)))
            if waiting == 0:
                admitted = max(admitted, 1)  # one request always fits an empty queue
            self.admitted += admitted
            return admitted

    def message(self) -> str:
        """What a request refused here is told (it names the queue, as Triton's own refusal does): the requests
        the queue held at the last read with those admitted since, and the work they are at the step's rate."""
        waiting = int(self.pending or 0) + self.admitted
        rate = self.rate()
        drain = f", about {waiting / rate:.1f} s of work" if rate and waiting else ""
        return (f"Exceeds maximum queue size: {self.model}'s queue holds about {waiting} requests{drain}, over "
                f"{FILL:.0%} of this server's {self.budget_s:g} s budget or its bound of {self.bound}; try again later")

    def _read(self) -> tuple[float, float] | None:
        """(pending, answers so far) of the model step, from one read of the metrics; None where it failed."""
        try:
            if self._connection is None:
                self._connection = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
            self._connection.request("GET", "/metrics")
            response = self._connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise OSError(f"HTTP {response.status}")
        except (OSError, http.client.HTTPException):
            if self._connection is not None:
                self._connection.close()
            self._connection = None
            return None
        text = b"\n" + body
        pending = sample_sum(text, "nv_inference_pending_request_count", self.model)
        answers = sample_sum(text, "nv_inference_request_success", self.model)
        return None if pending is None or answers is None else (pending, answers)

    def _run(self) -> None:
        while not self._closed:
            self._wake.clear()  # before the check: a request that comes after it wakes the wait below
            if time.monotonic() - self._last_pressure > IDLE_S:
                with self._lock:
                    self.pending, self._last = None, None  # what was read grows stale: admit until the next read
                    self._busy.clear()
                self._wake.wait()
                continue
            read = self._read()
            now = time.monotonic()
            with self._lock:
                if read is None:
                    self.pending, self._last = None, None
                else:
                    self._observe(now, *read)
            time.sleep(POLL_S)

    def _observe(self, now: float, pending: float, answers: float) -> None:
        """Takes one read: the queue now, and the model step's answers since the last read where a queue spanned it."""
        if self._last is not None and self._last[1] > 0 and pending > 0 and now > self._last[0]:
            self._busy.append((now, now - self._last[0], answers - self._last[2]))
        while self._busy and now - self._busy[0][0] > RATE_WINDOW_S:
            self._busy.popleft()
        self.pending, self.admitted, self._last = pending, 0, (now, pending, answers)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
