"""Infinity measured beside Triton with the same rows.

The test starts the real Infinity from its own virtualenv (`make infinity`); without one it skips, unless
TRITONIZE_INFINITY=1 (`make test TRITONIZE_INFINITY=1`) says it was installed for the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support import REPO_ROOT as ROOT
from support.bench import ENGINES
from tritonize.bench import check, infinity
from tritonize.cli import main


@pytest.fixture(scope="session")
def infinity_install() -> infinity.Install:
    try:
        return infinity.locate(infinity.venv_python(ROOT / infinity.VENV))
    except infinity.Unavailable as exc:
        if os.environ.get("TRITONIZE_INFINITY") == "1":
            pytest.fail(f"Infinity was to be installed for this run: {exc}")
        pytest.skip(f"{exc}: {infinity.INSTALL_HINT}")


# -- end to end ------------------------------------------------------------------


def test_bench_measures_infinity_with_the_same_rows(tiny_embedding_repo, infinity_install, tmp_path, capsys) -> None:
    out = tmp_path / "results"
    rc = main([
        "bench", "--repository", str(tiny_embedding_repo.repository), "--start-local",
        "--requests", "20", "--warmup", "5", "--concurrency", "1,4", "--workloads", "short,mixed",
        "--short-tokens", "16", "--protocols", "grpc", "--peers", ",".join(ENGINES),
        "--infinity-python", str(infinity_install.python), "--output", str(out),
    ])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    assert doc["skipped"] == {}
    assert doc["meta"]["infinity"]["version"] == infinity.VERSION
    assert set(doc["meta"]["infinity"]["engines"]) == set(ENGINES)
    for system in ENGINES:
        runs = [r for r in doc["runs"] if r["system"] == system]
        assert {(r["workload"], r["concurrency"]) for r in runs} == {(w, c) for w in ("short", "mixed") for c in (1, 4)}
        assert all(r["completed"] == 20 and r["errors"] == 0 and r["latency_ms"]["p50"] > 0 for r in runs), runs
    # The torch engine answers as the floor does, on every checked row.
    for workload in ("short", "mixed"):
        c = doc["checks"]["infinity"][workload]
        assert c["passed"] and c["rows"] == 8 and c["min_cosine"] >= check.MIN_COSINE
    # The ONNX engine cuts texts at the model's position limit (128 here), not at the 64 tokens the
    # repository serves: it agrees on 16-token rows, and the guard reports the longer ones.
    assert doc["checks"]["infinity-onnx"]["short"]["passed"]
    mixed = doc["checks"]["infinity-onnx"]["mixed"]
    assert not mixed["passed"] and "cosine" in mixed["first_mismatch"]
    printed = capsys.readouterr()
    assert "Infinity, torch" in printed.out and "Infinity, ONNX (optimum)" in printed.out
    assert "min cosine" in printed.out
    assert "Infinity, ONNX (optimum)'s answers differ from the floor's" in printed.err
    # Everything Infinity wrote stayed in the run folder, and no Infinity runs there any more.
    assert (out / ".run" / "peer-infinity-onnx" / "model" / "model.onnx").exists()
    assert not (Path(tiny_embedding_repo.source) / "model.onnx").exists()
    assert not _processes_in(out)


def _processes_in(folder: Path) -> list[int]:
    """PIDs whose working directory is inside `folder`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(folder.resolve()):
                found.append(int(proc.name))
        except OSError:
            continue
    return found
