"""A small client for a tritonize repository: raw strings in, task outputs out.

The served ensemble takes BYTES inputs shaped [N, 1] (`TEXT`) and returns what its task declares (`embedding`;
`logits` + `probabilities`; `indices` + `values`; a reranker's `logit`). The task-shaped calls (`embed`, `sparse`,
`classify`, `rerank`, ...) are the tasks' own, each written once for both clients in its task's calls.py
(tritonize/tasks/calls.py says how); they become methods of `TextClient` and `AsyncTextClient` here. `task()` asks
the server's metadata which task a model serves. Texts may be `str` (sent as UTF-8) or `bytes` (sent untouched, so
invalid UTF-8 reaches the server and its error can be checked). Server-side failures raise `ServerError`, which
keeps Triton's own message.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from . import tasks
from .errors import TritonizeError
from .spec import TEXT_INPUT
from .tasks.calls import Infer, Parameter, Text, Texts, declared, method, with_prompt
from .tasks.classification.contract import PROBABILITIES, Label, parse_classes
from .tasks.embedding.contract import OUTPUT as EMBEDDING
from .tasks.multi_vector.calls import multi_vector_inputs
from .tasks.contract import TaskContract
from .tasks.question_answering.contract import OUTPUT as ANSWER
from .tasks.rerank.calls import rerank_inputs
from .tasks.rerank.contract import OUTPUT as LOGIT
from .tasks.sparse_embedding.contract import SparseVector
from .tasks.token_classification.contract import OUTPUT as ENTITIES

Answers = TaskContract  # its former name: `from tritonize.client import Answers` keeps working

Protocol = Literal["grpc", "http"]

INPUT_NAME = TEXT_INPUT
DEFAULT_URLS = {"grpc": "127.0.0.1:8001", "http": "127.0.0.1:8000"}


class ServerError(TritonizeError):
    """Triton rejected or failed a request; `status` is its code (e.g. StatusCode.INVALID_ARGUMENT, 400)."""

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        self.status = status

    @classmethod
    def wrap(cls, exc: Exception) -> ServerError:
        message = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
        status = exc.status() if hasattr(exc, "status") and callable(exc.status) else None
        return cls(message or str(exc), str(status) if status is not None else None)


def is_unavailable(error: ServerError) -> bool:
    """The server refused the request because it is full (a step's queue): worth trying again later."""
    return bool(error.status) and ("UNAVAILABLE" in error.status or error.status == "503")


def backoff_delays(retries: int, base_s: float, cap_s: float = 2.0) -> Iterator[float]:
    """Seconds to wait before each retry: exponential, with full jitter so that refused clients spread out."""
    for attempt in range(retries):
        yield random.uniform(0.0, min(cap_s, base_s * 2**attempt))


@dataclass
class RequestResult:
    """One request of a concurrent run: its outputs or its error, and its latency."""

    texts: Sequence[Text]
    outputs: dict[str, np.ndarray] | None
    error: ServerError | None
    latency_s: float

    @property
    def ok(self) -> bool:
        return self.error is None


def text_array(texts: Iterable[Text]) -> np.ndarray:
    """The [N, 1] object array Triton expects for a BYTES input."""
    items = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
    if not items:
        raise ValueError("no texts to send")
    arr = np.empty((len(items), 1), dtype=object)
    arr[:, 0] = items
    return arr


def split_url(url: str, protocol: Protocol) -> tuple[str, bool]:
    """tritonclient wants host:port; accept http(s):// and grpc:// prefixes too."""
    ssl = url.startswith("https://")
    for prefix in ("http://", "https://", "grpc://"):
        if url.startswith(prefix):
            url = url[len(prefix) :]
    return url.rstrip("/"), ssl


def chunks(texts: Sequence[Text], batch_size: int) -> list[list[Text]]:
    """Split texts into requests of at most batch_size texts."""
    size = max(1, batch_size)
    return [list(texts[i : i + size]) for i in range(0, len(texts), size)]


def build_request(module, inputs: Mapping[str, Iterable[Text]], outputs: Sequence[str] | None, top_k: int):
    """The text inputs and the requested outputs, for tritonclient.grpc or .http alike.

    With top_k > 0 the named outputs come back as Triton classification
    strings "score:index:label", top_k per text.
    """
    if top_k and not outputs:
        raise ValueError("top_k needs the outputs to classify (e.g. outputs=['probabilities'])")
    tensors = []
    for name, texts in inputs.items():
        data = text_array(texts)
        inp = module.InferInput(name, list(data.shape), "BYTES")
        inp.set_data_from_numpy(data)
        tensors.append(inp)
    requested = [module.InferRequestedOutput(name, class_count=top_k) for name in outputs] if outputs else None
    return tensors, requested





def named(texts: Texts, default: str) -> Mapping[str, Iterable[Text]]:
    """Texts for the model's one text input, or a mapping of input name -> texts (pairs: QUERY and TEXT)."""
    return texts if isinstance(texts, Mapping) else {default: texts}



class TextClient:
    """Blocking client over tritonclient's gRPC or HTTP API.

    `infer_many` runs requests on a thread pool: gRPC shares one thread-safe
    client, HTTP gets one client per thread (tritonclient.http is not thread safe).
    """

    def __init__(
        self,
        url: str | None = None,
        model: str = "",
        protocol: Protocol = "grpc",
        timeout_s: float = 60.0,
        input_name: str = INPUT_NAME,
        retries: int = 0,
        backoff_s: float = 0.05,
    ):
        if protocol not in DEFAULT_URLS:
            raise ValueError(f"protocol must be 'grpc' or 'http', not {protocol!r}")
        if not model:
            raise TritonizeError("no model name", hint="pass --model NAME (the ensemble's name)")
        self.url, self._ssl = split_url(url or DEFAULT_URLS[protocol], protocol)
        self.model = model
        self.protocol: Protocol = protocol
        self.timeout_s = timeout_s  # per request
        self.input_name = input_name
        self.retries, self.backoff_s = retries, backoff_s  # opt-in: retry UNAVAILABLE (a full queue) with backoff
        self._local = threading.local()
        self._clients: list = []
        self._lock = threading.Lock()
        if protocol == "grpc":
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
        self._module = module

    # -- connection -------------------------------------------------------
    def _client(self):
        client = getattr(self._local, "client", None)
        if client is None and self.protocol == "grpc" and self._clients:
            return self._clients[0]
        if client is None:
            if self.protocol == "grpc":
                client = self._module.InferenceServerClient(self.url, ssl=self._ssl)
            else:
                client = self._module.InferenceServerClient(
                    self.url, ssl=self._ssl, connection_timeout=self.timeout_s, network_timeout=self.timeout_s
                )
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._local = threading.local()

    def __enter__(self) -> TextClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_ready(self) -> bool:
        """True when the server and this model are ready."""
        try:
            client = self._client()
            return bool(client.is_server_ready() and client.is_model_ready(self.model))
        except Exception:  # noqa: BLE001 - unreachable counts as not ready
            return False

    def task(self) -> TaskContract:
        """The contract of the task this model serves, recognised by its outputs: its name, and how to read them."""
        return tasks.for_outputs(*self._names())

    def output_names(self) -> list[str]:
        """The model's outputs, from its metadata: `embedding`, or `logits` + `probabilities`."""
        return self._names()[0]

    def _names(self) -> tuple[list[str], list[str]]:
        """The model's outputs and inputs, from its metadata."""
        try:
            meta = self._client().get_model_metadata(self.model)
        except self._module.InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        if self.protocol == "grpc":
            return [o.name for o in meta.outputs], [i.name for i in meta.inputs]
        return [o["name"] for o in meta.get("outputs", [])], [i["name"] for i in meta.get("inputs", [])]

    # -- inference --------------------------------------------------------
    def infer(self, texts: Texts, outputs: Sequence[str] | None = None, top_k: int = 0) -> dict[str, np.ndarray]:
        """One request; every output the model returns (or those named), as numpy arrays.

        `texts` feed the model's text input, or map input names to texts
        (a reranker's QUERY and TEXT). With top_k > 0 the named outputs come
        back as classification strings "score:index:label", top_k per text.
        """
        delays = backoff_delays(self.retries, self.backoff_s)
        while True:
            try:
                return self._infer_once(texts, outputs, top_k)
            except ServerError as exc:
                delay = next(delays, None) if is_unavailable(exc) else None
                if delay is None:
                    raise
                time.sleep(delay)

    def _infer_once(self, texts: Texts, outputs: Sequence[str] | None, top_k: int) -> dict[str, np.ndarray]:
        m = self._module
        inputs, requested = build_request(m, named(texts, self.input_name), outputs, top_k)
        client = self._client()
        try:
            if self.protocol == "grpc":
                result = client.infer(self.model, inputs, outputs=requested, client_timeout=self.timeout_s)
                names = [o.name for o in result.get_response().outputs]
            else:
                result = client.infer(self.model, inputs, outputs=requested)
                names = [o["name"] for o in result.get_response().get("outputs", [])]
        except Exception as exc:
            if isinstance(exc, m.InferenceServerException):
                raise ServerError.wrap(exc) from None
            raise
        return {name: result.as_numpy(name) for name in names}

    def _answer(self, asked: Infer | Parameter) -> Any:
        """What a task's call asks (tasks/calls.py), sent."""
        if isinstance(asked, Parameter):
            return self._parameter(asked)
        return self.infer(asked.texts, outputs=asked.outputs, top_k=asked.top_k)

    def _parameter(self, asked: Parameter) -> str:
        try:
            config = self._client().get_model_config(self.model)
        except self._module.InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        if self.protocol == "grpc":
            found = config.config.parameters.get(asked.name)
            value = found.string_value if found is not None else None
        else:
            value = (config.get("parameters", {}).get(asked.name) or {}).get("string_value")
        return declared(asked, self.model, value)

    def __getattr__(self, name: str) -> Any:
        return task_call(self, name, asynchronous=False)

    def infer_many(
        self,
        requests: Iterable[Sequence[Text]],
        concurrency: int = 1,
        outputs: Sequence[str] | None = None,
        top_k: int = 0,
    ) -> list[RequestResult]:
        """Send many requests, `concurrency` at a time; results in request order, errors captured."""

        def one(texts: Sequence[Text]) -> RequestResult:
            start = time.perf_counter()
            try:
                res = self.infer(texts, outputs=outputs, top_k=top_k)
                return RequestResult(texts, res, None, time.perf_counter() - start)
            except ServerError as exc:
                return RequestResult(texts, None, exc, time.perf_counter() - start)

        requests = list(requests)
        if concurrency <= 1:
            return [one(r) for r in requests]
        if self.protocol == "grpc":
            self._client()  # one shared channel, created before the threads start
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(one, requests))


class AsyncTextClient:
    """asyncio client over tritonclient.grpc.aio, for throughput."""

    def __init__(
        self,
        url: str | None = None,
        model: str = "",
        timeout_s: float = 60.0,
        input_name: str = INPUT_NAME,
        retries: int = 0,
        backoff_s: float = 0.05,
    ):
        if not model:
            raise TritonizeError("no model name", hint="pass --model NAME (the ensemble's name)")
        self.url, self._ssl = split_url(url or DEFAULT_URLS["grpc"], "grpc")
        self.model = model
        self.timeout_s = timeout_s  # per request
        self.input_name = input_name
        self.retries, self.backoff_s = retries, backoff_s  # opt-in: retry UNAVAILABLE (a full queue) with backoff
        self._client = None

    def _get(self):
        # Created lazily, inside the running loop that will use it.
        if self._client is None:
            import tritonclient.grpc.aio as aio

            self._client = aio.InferenceServerClient(self.url, ssl=self._ssl)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def __aenter__(self) -> AsyncTextClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def is_ready(self) -> bool:
        try:
            client = self._get()
            return bool(await client.is_server_ready() and await client.is_model_ready(self.model))
        except Exception:  # noqa: BLE001
            return False

    async def task(self) -> TaskContract:
        return tasks.for_outputs(*await self._names())

    async def output_names(self) -> list[str]:
        return (await self._names())[0]

    async def _names(self) -> tuple[list[str], list[str]]:
        from tritonclient.utils import InferenceServerException

        try:
            meta = await self._get().get_model_metadata(self.model)
        except InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        return [o.name for o in meta.outputs], [i.name for i in meta.inputs]

    async def infer(self, texts: Texts, outputs: Sequence[str] | None = None, top_k: int = 0) -> dict[str, np.ndarray]:
        """One request, as TextClient.infer (retries included)."""
        delays = backoff_delays(self.retries, self.backoff_s)
        while True:
            try:
                return await self._infer_once(texts, outputs, top_k)
            except ServerError as exc:
                delay = next(delays, None) if is_unavailable(exc) else None
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def _infer_once(self, texts: Texts, outputs: Sequence[str] | None, top_k: int) -> dict[str, np.ndarray]:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        inputs, requested = build_request(grpcclient, named(texts, self.input_name), outputs, top_k)
        try:
            result = await self._get().infer(self.model, inputs, outputs=requested, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}

    async def _answer(self, asked: Infer | Parameter) -> Any:
        """What a task's call asks (tasks/calls.py), sent."""
        if isinstance(asked, Parameter):
            return await self._parameter(asked)
        return await self.infer(asked.texts, outputs=asked.outputs, top_k=asked.top_k)

    async def _parameter(self, asked: Parameter) -> str:
        from tritonclient.utils import InferenceServerException

        try:
            config = await self._get().get_model_config(self.model)
        except InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        found = config.config.parameters.get(asked.name)
        return declared(asked, self.model, found.string_value if found is not None else None)

    def __getattr__(self, name: str) -> Any:
        return task_call(self, name, asynchronous=True)

    async def infer_many(
        self,
        requests: Iterable[Sequence[Text]],
        concurrency: int = 8,
        outputs: Sequence[str] | None = None,
        top_k: int = 0,
    ) -> list[RequestResult]:
        """Send many requests with at most `concurrency` in flight; results in request order."""
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(texts: Sequence[Text]) -> RequestResult:
            async with gate:
                start = time.perf_counter()
                try:
                    res = await self.infer(texts, outputs=outputs, top_k=top_k)
                    return RequestResult(texts, res, None, time.perf_counter() - start)
                except ServerError as exc:
                    return RequestResult(texts, None, exc, time.perf_counter() - start)

        return list(await asyncio.gather(*(one(r if isinstance(r, Mapping) else list(r)) for r in requests)))


def task_call(client: Any, name: str, asynchronous: bool) -> Any:
    """A call of a task registered after this module was imported (tasks.register), bound to the client."""
    call = None if name.startswith("_") else tasks.client_calls().get(name)
    if call is None:
        raise AttributeError(f"{type(client).__name__!r} object has no attribute {name!r}")
    return types.MethodType(method(call, type(client).__name__, asynchronous), client)


def attach_calls() -> None:
    """Every registered task's calls as methods of both clients; a call named like a client's own method is
    refused (it would be shadowed)."""
    for name, call in tasks.client_calls().items():
        for owner, asynchronous in ((TextClient, False), (AsyncTextClient, True)):
            if name in vars(owner) and not hasattr(vars(owner)[name], "task_call"):
                raise TritonizeError(f"the task call {name!r} is named like a {owner.__name__} method")
            setattr(owner, name, method(call, owner.__name__, asynchronous))


attach_calls()


def run_concurrent(
    url: str | None,
    model: str,
    requests: Iterable[Sequence[Text]],
    concurrency: int = 8,
    outputs: Sequence[str] | None = None,
    top_k: int = 0,
    timeout_s: float = 60.0,
) -> list[RequestResult]:
    """Blocking wrapper: run `requests` through an AsyncTextClient at `concurrency`."""

    async def main() -> list[RequestResult]:
        async with AsyncTextClient(url, model, timeout_s=timeout_s) as client:
            return await client.infer_many(requests, concurrency, outputs=outputs, top_k=top_k)

    return asyncio.run(main())


__all__ = [
    "ANSWER",
    "EMBEDDING",
    "ENTITIES",
    "LOGIT",
    "PROBABILITIES",
    "AsyncTextClient",
    "SparseVector",
    "Label",
    "RequestResult",
    "ServerError",
    "TextClient",
    "chunks",
    "multi_vector_inputs",
    "parse_classes",
    "rerank_inputs",
    "run_concurrent",
    "text_array",
    "with_prompt",
]
