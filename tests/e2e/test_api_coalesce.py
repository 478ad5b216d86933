"""Requests that arrive together go to the real local Triton as one request of many rows (api/coalesce.py), each
answered with its own rows, its own token count and its own error.

Triton's own statistics count what reached it: fewer ensemble requests than API requests, and as many rows.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from support.api import KEY, matryoshka_repo, served  # noqa: F401 - fixtures

TEXTS = [f"text number {i} " + "word " * (i % 7) for i in range(48)]


def ensemble_stats(endpoints, name: str) -> tuple[int, int, int]:
    """(requests answered, requests failed, rows) of the ensemble, as Triton counts them once they settle: Triton
    counts a request after its answer is sent, so the last answer a client read may not be counted yet."""
    import tritonclient.grpc as grpcclient

    def read() -> tuple[int, int, int]:
        stats = client.get_inference_statistics(name, as_json=True)["model_stats"][0]
        inference = stats["inference_stats"]
        return (int(inference.get("success", {}).get("count", 0)), int(inference.get("fail", {}).get("count", 0)),
                int(stats.get("inference_count", 0)))

    client = grpcclient.InferenceServerClient(endpoints.grpc)
    try:
        last, now = None, read()
        while now != last:
            time.sleep(0.2)
            last, now = now, read()
        return now
    finally:
        client.close()


def reference(endpoints, name: str, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each text's vector and token count, each text alone through the ensemble over gRPC."""
    from tritonize.client import TextClient

    vectors, counts = [], []
    with TextClient(endpoints.grpc, name, protocol="grpc") as client:
        for text in texts:
            answer = client.infer({"TEXT": [text]}, ["embedding", "tokens"])
            vectors.append(answer["embedding"][0])
            counts.append(int(answer["tokens"].sum()))
    return np.stack(vectors), np.array(counts)


async def post_together(url: str, bodies: list[dict]) -> list[tuple[int, dict]]:
    """Every body sent at once, each on a connection of its own."""
    import aiohttp

    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(body: dict) -> tuple[int, dict]:
            async with session.post(url, data=json.dumps(body), headers=headers) as response:
                return response.status, json.loads(await response.read())

        return await asyncio.gather(*(one(b) for b in bodies))


def test_single_texts_sent_together_are_answered_each_with_its_own_rows(served) -> None:
    repo, endpoints, api = served
    expected, tokens = reference(endpoints, repo.name, TEXTS)
    before = ensemble_stats(endpoints, repo.name)
    bodies = [{"model": repo.name, "input": text, "encoding_format": "float"} for text in TEXTS]
    answers = asyncio.run(post_together(api.url + "/v1/embeddings", bodies))
    after = ensemble_stats(endpoints, repo.name)
    assert all(code == 200 for code, _ in answers), [a for a in answers if a[0] != 200][:2]
    got = np.array([a["data"][0]["embedding"] for _, a in answers], dtype=np.float32)
    assert np.abs(got - expected).max() <= 1e-6  # each its own text's vector, whichever rows it rode with
    assert [a["usage"]["prompt_tokens"] for _, a in answers] == tokens.tolist()  # and its own tokens
    requests, failed, rows = (a - b for a, b in zip(after, before))
    assert rows == len(TEXTS) and failed == 0
    assert requests < len(TEXTS), f"{requests} Triton requests for {len(TEXTS)} API requests: none coalesced"


def backend_over(endpoints, repository, transport: str = "grpc"):
    """The API's backend in this process, over the real Triton, knowing what its ensembles answer; its inferences
    over gRPC, or over Triton's HTTP port (`--http-url`)."""
    from tritonize.api.backend import TritonBackend
    from tritonize.api.catalog import Catalog

    backend = TritonBackend(endpoints.grpc, http_url=endpoints.http if transport == "http" else None)
    model = Catalog.read(repository).models[0]
    return backend, model


TRANSPORTS = pytest.mark.parametrize("transport", ["grpc", "http"])


@TRANSPORTS
def test_one_bad_text_fails_only_its_own_request(served, transport) -> None:
    """A blank text passes the API's types and is refused by the tokenizer step: sent in one batch with good texts,
    Triton refuses the batch, and the batch is sent again one request at a time, so only the blank one fails,
    with its own index."""
    from tritonize.api.errors import ApiError
    from tritonize.serving.texts import GRAPH_REFUSALS

    repo, endpoints, _ = served
    expected, _ = reference(endpoints, repo.name, TEXTS[:4])
    backend, model = backend_over(endpoints, repo.repository, transport)

    async def run():
        await backend.open()
        try:
            assert await backend.output_names(model.name)
            first = ensemble_stats(endpoints, repo.name)
            with pytest.raises(ApiError):  # what Triton counts of one refused request
                await backend.infer(model, model.contract.request([(" ",)]), ["embedding"])
            before = ensemble_stats(endpoints, repo.name)
            rows = [TEXTS[0], TEXTS[1], " ", TEXTS[2], TEXTS[3]]
            answers = await asyncio.gather(*(backend.infer(model, model.contract.request([(t,)]), ["embedding"])
                                             for t in rows), return_exceptions=True)
            return first, before, answers, ensemble_stats(endpoints, repo.name)
        finally:
            await backend.close()

    first, before, answers, after = asyncio.run(run())
    refused = answers[2]
    # the Python step names the text; the texts step of a graph layout refuses the request, in the same words
    said = GRAPH_REFUSALS["empty"] if model.tokenizes_in_graph else "TEXT[0] is empty"
    assert isinstance(refused, ApiError) and refused.status == 422 and said in refused.message, refused.message
    good = [a for i, a in enumerate(answers) if i != 2]
    assert np.abs(np.concatenate([a["embedding"] for a in good]) - expected).max() <= 1e-6
    one_refusal = before[1] - first[1]
    requests, failed, rows = (a - b for a, b in zip(after, before))
    # The batch of five refused, then the blank text refused alone; the four good ones answered alone.
    assert (failed, requests, rows) == (2 * one_refusal, 4, 4), (first, before, after)


@TRANSPORTS
def test_a_failed_triton_call_gives_each_request_an_error_of_its_own(served, transport) -> None:
    """Triton gone (a port where nothing listens): every request of the batch is answered 503, none is left
    waiting, and each error is its own object (a route may rewrite its message)."""
    from tritonize.api.backend import TritonBackend
    from tritonize.api.errors import ApiError
    from tritonize.runtime.machine import free_ports

    repo, endpoints, _ = served
    _, model = backend_over(endpoints, repo.repository)
    (port,) = free_ports(1)
    gone = f"127.0.0.1:{port}"
    backend = TritonBackend(gone, timeout_s=5.0, http_url=gone if transport == "http" else None)
    backend.coalesced.add(model.name)

    async def run():
        await backend.open()
        try:
            return await asyncio.wait_for(asyncio.gather(
                *(backend.infer(model, model.contract.request([(t,)]), ["embedding"]) for t in TEXTS[:6]),
                return_exceptions=True), 30)
        finally:
            await backend.close()

    answers = asyncio.run(run())
    assert all(isinstance(a, ApiError) and a.status == 503 for a in answers), answers
    assert len({id(a) for a in answers}) == len(answers)


def test_inferences_over_http_outlive_a_restart_of_triton(matryoshka_repo, local_triton, local_options,
                                                          tmp_path) -> None:
    """The kept connections die with the server: the next request goes out on a new one and is answered, and
    a request while nothing listens is a 503, never a hang."""
    from tritonize.api.errors import ApiError
    from tritonize.runtime.local import LocalRuntime

    options = local_options(matryoshka_repo.repository, tmp_path / "run")
    runtime = LocalRuntime(options, quiet=True)
    endpoints = runtime.up()
    backend, model = backend_over(endpoints, matryoshka_repo.repository, "http")
    request = model.contract.request([(TEXTS[0],)])

    async def infer():
        return (await backend.infer(model, request, ["embedding"]))["embedding"]

    async def run():
        nonlocal runtime
        await backend.open()
        try:
            first = await asyncio.gather(*(infer() for _ in range(4)))  # four kept connections
            assert len(backend.http._idle) == 4
            runtime.down()  # the loop waits here: it learns of the closed connections when the next request goes
            with pytest.raises(ApiError) as refused:
                await asyncio.wait_for(infer(), 30)
            assert refused.value.status == 503, refused.value.message
            runtime = LocalRuntime(options, quiet=True)
            runtime.up()
            again = await asyncio.wait_for(infer(), 30)
            # the four went out together, so Triton may have batched them: equal to float32's last bits, not bit for bit
            assert again.shape == first[0].shape and np.abs(again - first[0]).max() <= 1e-6
        finally:
            await backend.close()

    try:
        asyncio.run(run())
    finally:
        runtime.down()
