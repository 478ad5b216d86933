"""What the container tests share: the served model's names, texts and tolerances, the figures they record,
waiting, comparing answers, and checking that published ports listen on loopback only."""


from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

FIGURES: dict[str, Any] = {}  # measured figures, written to <engine dir>/figures.json at the end

# What the tests send and how they compare, for the SDK's container and compose's alike.
NAME = "minilm"  # the ensemble: raw strings in, an embedding out
TOKENIZER_STEP = f"{NAME}_tokenizer"  # config.pbtxt: a Python-backend step (the stubs the watchdog tests kill)
MODEL_STEP = f"{NAME}_model"  # config.pbtxt: the onnxruntime backend; configs/fused.pbtxt: the fused Python step
STATISTICS_STEP = f"{NAME}_statistics"  # config.pbtxt: a Python-backend step that counts what the graph answered
TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "Ünïcödé café — 日本語のテキスト 🚀", "a"]
LONG = " ".join(["containers restart only when their process exits"] * 40)
ATOL = 1e-5  # Triton's answers against the local server's
API_ATOL = 1e-4  # the API's JSON floats (normalized) against the same
# NVIDIA's memlock=-1 needs CAP_SYS_RESOURCE, which the test machine may lack: the host's hard limit then.
_HARD = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
MEMLOCK = -1 if _HARD == resource.RLIM_INFINITY else _HARD
# Where the host listens, as /proc/net/tcp{,6} write loopback: IPv4, IPv4-mapped IPv6 and ::1.
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def record(name: str, value: Any) -> None:
    FIGURES[name] = value


def wait_for(predicate, timeout_s: float, step_s: float = 0.25) -> float:
    """Seconds until predicate() held; fails the test after timeout_s."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout_s, f"not within {timeout_s}s"
        time.sleep(step_s)
    return time.monotonic() - start


def embedding(outputs: dict[str, np.ndarray]) -> np.ndarray:
    """The ensemble's embedding: its one float output of one row per text."""
    (value,) = [v for v in outputs.values() if v.dtype.kind == "f" and v.ndim == 2]
    return value


def max_abs(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - expected.astype(np.float64)).max())


def assert_same(got: np.ndarray, expected: np.ndarray, what: object = "") -> None:
    """Floats within ATOL, anything else (flags, counts) equal."""
    assert got.shape == expected.shape, what
    if got.dtype.kind == "f":
        assert np.isfinite(got).all() and np.abs(got - expected).max() <= ATOL, what
    else:
        assert np.array_equal(got, expected), what


def listening() -> dict[int, set[str]]:
    """The host's listening TCP sockets: port -> the addresses it listens on (/proc/net/tcp{,6}'s hex)."""
    found: dict[int, set[str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port = local.rsplit(":", 1)
            if state == "0A":
                found.setdefault(int(port, 16), set()).add(address)
    return found


def assert_loopback_only(ports: list[int]) -> None:
    """Every one of these host ports is listened on, and on loopback only (the engine's proxy binds there)."""
    sockets = listening()
    for port in ports:
        assert sockets.get(port) and sockets[port] <= LOOPBACK, (port, sockets.get(port))
