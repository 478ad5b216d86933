"""The API's OpenAPI document against the live API (one tiny embedder on a real local Triton, with a key): it lists
the routes this server's model answers and no other, and a schema fuzzer, with positive and negative data, finds
no server error, no undocumented status, content type or header, no response off its schema, no schema-valid
request refused, no schema-violating request accepted and no 405 without `Allow`, on three seeds; the interactive
docs render in a real browser that reaches nothing beyond loopback.
"""

from __future__ import annotations

import urllib.request

import pytest

from support.api import KEY, fuzz, matryoshka_repo, served, start_api, stop  # noqa: F401 - fixtures test_api.py shares
from support.browser import chromium, rendered

# An embedder's routes, and those of no one task; the routes of the tasks not served here answer 424, undocumented.
DOCUMENTED = {"/v1/embeddings", "/v2/embed", "/embed", "/similarity", "/v1/models", "/tokenize", "/decode", "/info",
              "/health", "/metrics"}
SEEDS, EXAMPLES = (1, 34, 53), 100


def test_the_document_lists_the_routes_the_served_model_answers(served) -> None:
    _, _, api = served
    _, _, schema = api.call("GET", "/openapi.json")
    assert set(schema["paths"]) == DOCUMENTED
    code, _, answer = api.call("POST", "/predict", {"inputs": "a"})  # another task's route: still its clear 424
    assert code == 424 and "no classification model is served here" in answer["error"]
    ids = schema["components"]["schemas"]["TEIDecodeRequest"]["properties"]["ids"]["anyOf"][0]["items"]
    code, _, refused = api.call("POST", "/decode", {"ids": [ids["maximum"] + 1]})
    assert code == 422 and "vocabulary" in refused["error"]  # beyond the documented maximum, as documented
    assert "422" in schema["paths"]["/decode"]["post"]["responses"]
    assert api.call("POST", "/decode", {"ids": [ids["maximum"]]})[0] == 200


@pytest.mark.parametrize("seed", SEEDS)
def test_schemathesis_finds_the_document_true(served, tmp_path, seed) -> None:
    _, _, api = served
    summary = fuzz(api.url, tmp_path, key=KEY, seed=seed, examples=EXAMPLES)
    print(f"seed {seed}: {summary}")


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
