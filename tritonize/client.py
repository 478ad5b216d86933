"""A small client for a tritonize repository: raw strings in, task outputs out.

The served ensemble takes BYTES inputs shaped [N, 1] (`TEXT`) and returns
what its task declares (`embedding`; `logits` + `probabilities`; `indices` +
`values`); task-shaped calls (`embed`, `sparse`, `classify`, ...) take their
names from the task modules, and
`task()` asks the server's metadata which task a model serves. Texts may be
`str` (sent as UTF-8) or `bytes` (sent untouched, so invalid UTF-8 reaches
the server and its error can be checked). Server-side failures raise
`ServerError`, which keeps Triton's own message.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Union

import numpy as np

from . import tasks
from .errors import TritonizeError
from .serving.multi_vector import FORM_INPUT
from .spec import TEXT_INPUT
from .tasks.answers import Answers
from .tasks.classification.answers import PROBABILITIES, Label, parse_classes
from .tasks.embedding.answers import OUTPUT as EMBEDDING
from .tasks.multi_vector.answers import COUNTS, DOCUMENT, SIMILARITY_PARAMETER, VECTORS, maxsim
from .tasks.multi_vector.answers import vectors as token_vectors
from .tasks.question_answering.answers import ANSWERS as QUESTION_ANSWERING
from .tasks.question_answering.answers import CONTEXT_INPUT, QUESTION_INPUT
from .tasks.question_answering.answers import OUTPUT as ANSWER
from .tasks.rerank.answers import OUTPUT as SCORE
from .tasks.rerank.answers import QUERY_INPUT
from .tasks.sparse_embedding.answers import INDICES, VALUES, SparseVector
from .tasks.sparse_embedding.answers import vectors as sparse_vectors
from .tasks.token_classification.answers import ANSWERS as TOKEN_CLASSIFICATION
from .tasks.token_classification.answers import OUTPUT as ENTITIES

Protocol = Literal["grpc", "http"]
Text = Union[str, bytes]
Texts = Union[Iterable[Text], Mapping[str, Iterable[Text]]]

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


def with_prompt(texts: Iterable[Text], prompt: str) -> list[Text]:
    """Each text behind the prompt (a query or passage instruction), as sentence-transformers prepends it."""
    if not prompt:
        return list(texts)
    return [prompt.encode("utf-8") + t if isinstance(t, bytes) else prompt + t for t in texts]


def rerank_inputs(query: Text, documents: Sequence[Text]) -> dict[str, list[Text]]:
    """One (query, document) pair per row, as a reranker takes them."""
    return {QUERY_INPUT: [query] * len(documents), TEXT_INPUT: list(documents)}


def multi_vector_inputs(texts: Sequence[Text], form: str) -> dict[str, list[Text]]:
    """Each text with its form (query or document), as a late-interaction model takes them."""
    return {TEXT_INPUT: list(texts), FORM_INPUT: [form] * len(texts)}


def named(texts: Texts, default: str) -> Mapping[str, Iterable[Text]]:
    """Texts for the model's one text input, or a mapping of input name -> texts (pairs: QUERY and TEXT)."""
    return texts if isinstance(texts, Mapping) else {default: texts}


def declared_similarity(model: str, value: str | None) -> str:
    """The similarity a late-interaction ensemble's configuration declares; any other model declares none."""
    if not value:
        raise TritonizeError(f"{model} declares no similarity: it is not a late-interaction model")
    return value


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

    def task(self) -> Answers:
        """The answers of the task this model serves, recognised by its outputs: its name, and how to read them."""
        return tasks.for_outputs(self.output_names())

    def output_names(self) -> list[str]:
        """The model's outputs, from its metadata: `embedding`, or `logits` + `probabilities`."""
        try:
            meta = self._client().get_model_metadata(self.model)
        except self._module.InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        if self.protocol == "grpc":
            return [o.name for o in meta.outputs]
        return [o["name"] for o in meta.get("outputs", [])]

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

    def embed(self, texts: Iterable[Text], prompt: str = "") -> np.ndarray:
        """Sentence embeddings, [N, dim] float32. `prompt` is prepended to each text, as sentence-transformers'
        encode(prompt=...) does (a folder's declared prompts are listed in its repository's tritonize.yaml)."""
        return self.infer(with_prompt(texts, prompt), outputs=[EMBEDDING])[EMBEDDING]

    def sparse(self, texts: Iterable[Text], prompt: str = "") -> list[SparseVector]:
        """Sparse (SPLADE) embeddings: per text, its non-zero vocabulary ids (ascending) and their weights, as
        SparseEncoder.encode returns them (`.dense(vocab)` for the full vector, `.pairs()` for the
        text-embeddings-inference form). `prompt` is prepended to each text, as encode(prompt=...) does."""
        return sparse_vectors(self.infer(with_prompt(texts, prompt), outputs=[INDICES, VALUES]))

    def classify(self, texts: Iterable[Text], top_k: int = 1) -> list[list[Label]]:
        """The top_k labels per text, best first, computed by Triton."""
        return parse_classes(self.infer(texts, outputs=[PROBABILITIES], top_k=max(1, top_k))[PROBABILITIES])

    def entities(self, texts: Iterable[Text]) -> list[list[dict]]:
        """Per text, the entities the token classifier found: entity_group (or entity), score, word, start, end."""
        return [row[ENTITIES] for row in TOKEN_CLASSIFICATION.rows(self.infer(texts, outputs=[ENTITIES]))]

    def answer(self, question: Text, context: Text) -> dict | None:
        """The span of `context` that answers `question`: {"answer", "score", "start", "end"} (None: no span)."""
        return self.answers([question], [context])[0]

    def answers(self, questions: Sequence[Text], contexts: Sequence[Text]) -> list[dict | None]:
        """One answer per (question, context) pair, in one request."""
        inputs = {QUESTION_INPUT: list(questions), CONTEXT_INPUT: list(contexts)}
        return [row[ANSWER] for row in QUESTION_ANSWERING.rows(self.infer(inputs, outputs=[ANSWER]))]

    def rerank(self, query: Text, documents: Sequence[Text]) -> np.ndarray:
        """One relevance score per document for `query`, [len(documents)] float32 (higher is more relevant)."""
        return self.infer(rerank_inputs(query, documents), outputs=[SCORE])[SCORE].reshape(-1)

    def multi_vector(self, texts: Sequence[Text], form: str = DOCUMENT) -> list[np.ndarray]:
        """A late-interaction model's vectors: per text, one [n, dim] float32 row per scored token, as
        MultiVectorEncoder.encode_query (form "query") or encode_document (form "document") returns them."""
        return token_vectors(self.infer(multi_vector_inputs(texts, form), outputs=[VECTORS, COUNTS]))

    def score(self, query: Text, documents: Sequence[Text]) -> np.ndarray:
        """One late-interaction score per document for `query`, [len(documents)] float32: MaxSim (or MeanMaxSim,
        as the model declares) over the served vectors, as MultiVectorEncoder.similarity scores them."""
        query_vectors = self.multi_vector([query], "query")[0]
        return maxsim(query_vectors, self.multi_vector(documents), self.similarity())

    def similarity(self) -> str:
        """The similarity a late-interaction model scores with, from its ensemble's configuration."""
        try:
            config = self._client().get_model_config(self.model)
        except self._module.InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        if self.protocol == "grpc":
            found = config.config.parameters.get(SIMILARITY_PARAMETER)
            value = found.string_value if found is not None else None
        else:
            value = (config.get("parameters", {}).get(SIMILARITY_PARAMETER) or {}).get("string_value")
        return declared_similarity(self.model, value)

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

    async def task(self) -> Answers:
        return tasks.for_outputs(await self.output_names())

    async def output_names(self) -> list[str]:
        from tritonclient.utils import InferenceServerException

        try:
            meta = await self._get().get_model_metadata(self.model)
        except InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        return [o.name for o in meta.outputs]

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

    async def embed(self, texts: Iterable[Text], prompt: str = "") -> np.ndarray:
        return (await self.infer(with_prompt(texts, prompt), outputs=[EMBEDDING]))[EMBEDDING]

    async def sparse(self, texts: Iterable[Text], prompt: str = "") -> list[SparseVector]:
        return sparse_vectors(await self.infer(with_prompt(texts, prompt), outputs=[INDICES, VALUES]))

    async def classify(self, texts: Iterable[Text], top_k: int = 1) -> list[list[Label]]:
        return parse_classes((await self.infer(texts, outputs=[PROBABILITIES], top_k=max(1, top_k)))[PROBABILITIES])

    async def entities(self, texts: Iterable[Text]) -> list[list[dict]]:
        return [row[ENTITIES] for row in TOKEN_CLASSIFICATION.rows(await self.infer(texts, outputs=[ENTITIES]))]

    async def answer(self, question: Text, context: Text) -> dict | None:
        return (await self.answers([question], [context]))[0]

    async def answers(self, questions: Sequence[Text], contexts: Sequence[Text]) -> list[dict | None]:
        inputs = {QUESTION_INPUT: list(questions), CONTEXT_INPUT: list(contexts)}
        return [row[ANSWER] for row in QUESTION_ANSWERING.rows(await self.infer(inputs, outputs=[ANSWER]))]

    async def rerank(self, query: Text, documents: Sequence[Text]) -> np.ndarray:
        return (await self.infer(rerank_inputs(query, documents), outputs=[SCORE]))[SCORE].reshape(-1)

    async def multi_vector(self, texts: Sequence[Text], form: str = DOCUMENT) -> list[np.ndarray]:
        """As TextClient.multi_vector: per text, its scored vectors [n, dim] in the form asked."""
        return token_vectors(await self.infer(multi_vector_inputs(texts, form), outputs=[VECTORS, COUNTS]))

    async def score(self, query: Text, documents: Sequence[Text]) -> np.ndarray:
        """As TextClient.score: MaxSim (or MeanMaxSim) of the query against each document, the two requests in
        flight together."""
        query_vectors, document_vectors, similarity = await asyncio.gather(
            self.multi_vector([query], "query"), self.multi_vector(documents), self.similarity())
        return maxsim(query_vectors[0], document_vectors, similarity)

    async def similarity(self) -> str:
        """The similarity a late-interaction model scores with, from its ensemble's configuration."""
        from tritonclient.utils import InferenceServerException

        try:
            config = await self._get().get_model_config(self.model)
        except InferenceServerException as exc:
            raise ServerError.wrap(exc) from None
        found = config.config.parameters.get(SIMILARITY_PARAMETER)
        return declared_similarity(self.model, found.string_value if found is not None else None)

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
    "PROBABILITIES",
    "SCORE",
    "AsyncTextClient",
    "SparseVector",
    "Label",
    "RequestResult",
    "ServerError",
    "TextClient",
    "chunks",
    "parse_classes",
    "run_concurrent",
    "text_array",
]
