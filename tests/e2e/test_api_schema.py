"""The API's OpenAPI document against the live API (one tiny embedder on a real local Triton, with a key): a
schema fuzzer finds no server error, no undocumented status, no response off its schema and no 405 without
`Allow`; the interactive docs render in a real browser that reaches nothing beyond loopback.
"""

from __future__ import annotations

import urllib.request

import pytest

from support.api import ANY_MODEL, KEY, REFUSING, accepting, fuzz, matryoshka_repo, served, start_api, stop  # noqa: F401 - fixtures test_api.py shares
from support.browser import chromium, rendered

# 424: no model of the route's task; 400: `model` names the served model, of another task.
NOT_SERVED = ("/v1/rerank", "/rerank", "/v1/ranking", "/score", "/predict", "/classify", "/embed_sparse",
              "/v1/entities", "/v1/answers")


def fuzz_config() -> str:
    return "\n".join([*(accepting(r, "400", "424") for r in NOT_SERVED),
                      *(accepting(r, "422") for r in (*ANY_MODEL, *REFUSING))])


def test_schemathesis_finds_the_document_true(served, tmp_path) -> None:
    _, _, api = served
    fuzz(api.url, tmp_path, fuzz_config(), KEY)


def test_every_route_names_its_methods_on_405_and_metrics_its_content_type(served) -> None:
    """RFC 9110: a 405 carries `Allow`, on every route; /metrics is served as the document declares it."""
    _, _, api = served
    _, _, schema = api.call("GET", "/openapi.json")
    for path, operations in schema["paths"].items():
        code, headers, answer = api.call("DELETE", path)
        assert code == 405 and answer is not None, (path, code)
        assert {m.upper() for m in operations} <= set(headers["Allow"].split(", ")), (path, headers["Allow"])
    declared = list(schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"])
    request = urllib.request.Request(api.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert declared == [response.headers["Content-Type"]] and declared[0].startswith("text/plain")


@pytest.mark.parametrize("page,shown", [("/docs", 'data-path="{}"'), ("/redoc", "{}")])
def test_interactive_docs_render_without_internet(served, page, shown) -> None:
    browser = chromium()
    repo, endpoints, keyed = served
    api = start_api(repo.repository, endpoints.grpc)  # a browser sends no key
    try:
        code, _, schema = api.call("GET", "/openapi.json")
        assert code == 200
        dom = rendered(browser, api.url + page)
        for path in schema["paths"]:
            assert shown.format(path) in dom, (page, path)
    finally:
        stop(api)
