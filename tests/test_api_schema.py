"""The API's OpenAPI document against the live API (one tiny embedder on a real local Triton, with a key): a
schema fuzzer finds no server error, no undocumented status, no response off its schema and no 405 without
`Allow`; the interactive docs render in a real browser that reaches nothing beyond loopback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from test_api import KEY, matryoshka_repo, served, start_api, stop  # noqa: F401 - the fixtures, reused

pytestmark = pytest.mark.e2e
CHECKS = ("not_a_server_error", "status_code_conformance", "response_schema_conformance", "positive_data_acceptance",
          "unsupported_method")
# Schema-valid requests a route may still refuse, and why: the statuses positive_data_acceptance accepts
# besides schemathesis' own (2xx, 401, 404 for a model of no such name, 429).
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]
# 424: no model of the route's task; 400: `model` names the served model, of another task.
NOT_SERVED = ("/v1/rerank", "/rerank", "/predict", "/embed_sparse", "/v1/entities", "/v1/answers")
# /tokenize reads any model's tokenizer: a prompt name that model does not declare is refused with 422 (the
# task routes' documents name the declared ones: api/openapi.py).
ANY_MODEL = ("/tokenize",)
FUZZ_TIMEOUT_S = 120


def accepting(route: str, *statuses: str) -> str:
    """A schemathesis operation section: positive_data_acceptance also takes these statuses on this route."""
    listed = ", ".join(f'"{s}"' for s in (*ACCEPTED, *statuses))
    return f'[[operations]]\ninclude-path = "{route}"\nchecks.positive_data_acceptance.expected-statuses = [{listed}]\n'


def fuzz_config() -> str:
    return "\n".join([*(accepting(r, "400", "424") for r in NOT_SERVED), *(accepting(r, "422") for r in ANY_MODEL)])


def fuzz(url: str, workdir: Path, config: str = "", key: str | None = None) -> None:
    """schemathesis against the live API from its own /openapi.json; its report on failure."""
    (workdir / "schemathesis.toml").write_text(config)
    command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(workdir / "schemathesis.toml"),
               "run", f"{url}/openapi.json", "--checks", ",".join(CHECKS), "--max-examples", "8",
               "--phases", "examples,coverage,fuzzing", "--workers", "1", "--seed", "34", "--generation-database",
               "none", "--no-color", "--report-dir", str(workdir / "report")]
    command += ["--header", f"Authorization: Bearer {key}"] if key else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=FUZZ_TIMEOUT_S, cwd=workdir)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert "Tested: 13" in done.stdout, done.stdout[-3000:]  # every documented operation was reached


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


def chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "no Chromium (make system-deps installs Debian's chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def rendered(browser: str, url: str) -> str:
    """The page's DOM after its scripts ran, in a headless Chromium that resolves no name and reaches every
    address but loopback's through a proxy that does not exist: nothing outside this machine loads."""
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=127.0.0.1",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--virtual-time-budget=15000",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


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


def test_the_browser_reaches_nothing_but_loopback() -> None:
    """The same browser, on FastAPI's default page (its assets on a public CDN), renders no route: the test
    above would fail had the docs still come from outside."""
    browser = chromium()
    page = ("<!doctype html><html><body><div id=swagger-ui></div>"
            "<script src='https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js'></script>"
            "<script>SwaggerUIBundle({url: '/openapi.json', dom_id: '#swagger-ui'})</script></body></html>")
    import base64

    dom = rendered(browser, "data:text/html;base64," + base64.b64encode(page.encode()).decode())
    assert "opblock" not in dom and "SwaggerUIBundle" in dom
