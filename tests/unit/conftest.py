"""Tests in tests/unit/ never start Triton: the server's own binary and the supervisor that runs it are refused
here, so a test that needs a server says so by living in tests/e2e/."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tritonize.runtime.instance import SUPERVISOR_MODULE

SERVER_BINARY = "tritonserver"


@pytest.fixture(autouse=True)
def no_triton_server(monkeypatch: pytest.MonkeyPatch) -> None:
    start = subprocess.Popen.__init__

    def refuse_a_server(self, args, *rest, **kwargs):  # noqa: ANN001
        words = [str(a) for a in (args if isinstance(args, (list, tuple)) else str(args).split())]
        if words and (Path(words[0]).name == SERVER_BINARY or SUPERVISOR_MODULE in words):
            raise AssertionError(f"a unit test starts Triton ({' '.join(words)[:120]}): it belongs in tests/e2e/")
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_a_server)
