"""The peer users compare Triton with: Hugging Face's "Using pipelines for a webserver".

A faithful, working version of that design: Starlette and uvicorn, the
PyTorch model loaded once, one asyncio queue feeding a single model loop that
runs in the event loop. `--batch` adds the doc's naive batching: after the
first request, keep taking requests while another arrives within 1 ms, then
run them as one batch padded to its longest text.

Three departures from the doc, each to make it work: Starlette 1.x has no
`on_event`, so startup is a `lifespan`; the doc's batching snippet drops the
first request of each batch, this one keeps it; and if the model loop dies,
every waiting and later request fails at once with HTTP 503 (the doc's design
leaves them all hanging, silently).

    python -m tritonize.bench.peer_server --model FOLDER --port 8080 [--batch]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..spec.options import CPU_DEFAULTS

BATCH_WAIT_S = 0.001  # the doc's 1 ms
MAX_BATCH = CPU_DEFAULTS.max_batch_size  # a CPU repository's default max_batch_size; the doc sets no limit

Row = tuple[str, ...]
Predict = Callable[[list[Row]], list]


@dataclass
class Counters:
    """Work done by the model loop; the benchmark reads deltas from GET /stats."""

    requests: int = 0
    batches: int = 0
    real_tokens: int = 0
    computed_tokens: int = 0  # padded to each batch's longest text

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class ModelLoopDied(RuntimeError):
    pass


class Pipeline:
    """tokenizer + PyTorch model, the part of a `transformers.pipeline` the server needs.

    The model is wrapped in the repository's own head (pooling and
    normalisation, softmax, a score), so it answers what Triton answers; the
    task says what a PyTorch server computes for a batch (its decoding too,
    for entities and answers). It is loaded as a pipeline loads it, with
    transformers' default attention (the export forces the slower eager
    attention, which would handicap the peer).
    """

    def __init__(self, model_folder: str, threads: int = 0):
        import torch
        from transformers import AutoTokenizer

        from .. import tasks
        from ..source import read_model
        from ..spec.options import GenerateOptions

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.spec = spec = read_model(GenerateOptions(model=model_folder))
        self.task = tasks.of(spec.head)
        self.model = self.task.exporter.load(spec, eager=False)
        self.tokenizer = AutoTokenizer.from_pretrained(spec.source)
        self.pairs = len(self.task.contract.text_inputs) == 2
        self.counters = Counters()

    def __call__(self, rows: list[tuple[str, ...]]) -> list:
        answers, real, padded = self.task.peer.doc_answers(self.spec, self.model, self.tokenizer, rows)
        self.counters.real_tokens += real
        self.counters.computed_tokens += padded
        return answers


async def server_loop(q: asyncio.Queue, predict: Predict, batch: bool, counters: Counters) -> None:
    """The doc's loop: one request (or one naive batch) at a time, in the event loop."""
    while True:
        (row, fut) = await q.get()
        rows, futures = [row], [fut]
        if batch:
            while len(rows) < MAX_BATCH:
                try:
                    (row, fut) = await asyncio.wait_for(q.get(), timeout=BATCH_WAIT_S)
                except asyncio.TimeoutError:
                    break
                rows.append(row)
                futures.append(fut)
        outs = predict(rows)  # blocks the event loop, as in the doc
        counters.requests += len(rows)
        counters.batches += 1
        for f, out in zip(futures, outs):
            if not f.done():
                f.set_result(out)


def read_row(payload: bytes, pairs: bool) -> Row:
    """A request body as a row: the raw UTF-8 text, as in the doc; a pair as a JSON list of two strings."""
    text = payload.decode("utf-8")
    if not pairs:
        return (text,)
    row = json.loads(text)
    if not (isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) for x in row)):
        raise ValueError("send a JSON list of two strings")
    return tuple(row)


def create_app(predict: Predict, batch: bool = False, counters: Counters | None = None, pairs: bool = False) -> Starlette:
    """The Starlette app; `predict` maps a list of rows (one text, or a pair) to one JSON-able answer per row."""
    counters = counters if counters is not None else getattr(predict, "counters", None) or Counters()

    async def homepage(request: Request) -> JSONResponse:
        state = request.app.state
        if state.dead is not None:
            return JSONResponse({"error": f"model loop died: {state.dead}"}, status_code=503)
        payload = await request.body()
        try:
            row = read_row(payload, pairs)
        except UnicodeDecodeError:
            return JSONResponse({"error": "body is not valid UTF-8"}, status_code=400)
        except ValueError as exc:
            return JSONResponse({"error": f"body is not a pair: {exc}"}, status_code=400)
        fut = asyncio.get_running_loop().create_future()
        state.pending.add(fut)
        try:
            await state.model_queue.put((row, fut))
            output = await fut
        except ModelLoopDied as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        finally:
            state.pending.discard(fut)
        return JSONResponse(output)

    async def health(request: Request) -> JSONResponse:
        dead = request.app.state.dead
        return JSONResponse({"ready": dead is None, "error": dead}, status_code=200 if dead is None else 503)

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse({**counters.to_dict(), "batching": batch})

    def on_loop_done(app: Starlette, task: asyncio.Task) -> None:
        """Fail every waiting request, and every later one, the moment the loop stops."""
        reason = "cancelled" if task.cancelled() else repr(task.exception() or "exited")
        app.state.dead = reason
        for fut in list(app.state.pending):
            if not fut.done():
                fut.set_exception(ModelLoopDied(f"model loop died: {reason}"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.model_queue = asyncio.Queue()
        app.state.pending = set()
        app.state.dead = None
        task = asyncio.create_task(server_loop(app.state.model_queue, predict, batch, counters))
        task.add_done_callback(lambda t: on_loop_done(app, t))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    routes = [
        Route("/", homepage, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/stats", stats, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the model folder the repository was generated from")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--batch", action="store_true", help="the doc's naive batching (1 ms window)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    args = parser.parse_args(argv)

    import uvicorn

    predict = Pipeline(args.model, args.threads)
    uvicorn.run(create_app(predict, args.batch, pairs=predict.pairs), host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
