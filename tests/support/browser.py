"""A headless Chromium (Debian's) that renders a page offline, for the API's /docs and /redoc."""


from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def chromium() -> str | None:
    found = shutil.which("chromium")  # Debian's, from make system-deps
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
