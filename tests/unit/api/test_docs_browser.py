"""The browser the interactive-docs test opens (tests/e2e/test_api_schema.py): headless Chromium that reaches
nothing beyond loopback, shown by a page that loads Swagger UI from its public CDN and renders nothing.
"""

from __future__ import annotations

import base64

from support.browser import chromium, rendered


def test_the_browser_reaches_nothing_but_loopback() -> None:
    """The same browser, on FastAPI's default page (its assets on a public CDN), renders no route: the docs test
    would fail had the docs still come from outside."""
    browser = chromium()
    page = ("<!doctype html><html><body><div id=swagger-ui></div>"
            "<script src='https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js'></script>"
            "<script>SwaggerUIBundle({url: '/openapi.json', dom_id: '#swagger-ui'})</script></body></html>")
    dom = rendered(browser, "data:text/html;base64," + base64.b64encode(page.encode()).decode())
    assert "opblock" not in dom and "SwaggerUIBundle" in dom
