"""Every test in tests/e2e/ starts a real Triton Inference Server: each is marked `e2e` here, once, and needs the
local Triton (a skip without it, a failure in CI: the `local_triton` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session", autouse=True)
def triton_runs_here(local_triton) -> None:
    """Before any server fixture: the wheel's tritonserver must be able to start on this machine."""
