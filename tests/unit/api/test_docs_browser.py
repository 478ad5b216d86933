"""The API's OpenAPI document against the live API (one tiny embedder on a real local Triton, with a key): a
schema fuzzer finds no server error, no undocumented status, no response off its schema and no 405 without
`Allow`; the interactive docs render in a real browser that reaches nothing beyond loopback.
"""

from __future__ import annotations

import pytest

from support.browser import chromium, rendered

pytestmark = pytest.mark.e2e


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
