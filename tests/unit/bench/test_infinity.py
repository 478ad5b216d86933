"""Infinity as a bench peer, before anything is timed: found, skipped or refused; its answers checked
against the floor by cosine.
"""

from __future__ import annotations

import pytest

from support.bench import ENGINES
from tritonize.bench import check, infinity
from tritonize.bench.options import BenchOptions
from tritonize.bench.runner import Bench
from tritonize.cli import main
from tritonize.errors import TritonizeError

# -- the cosine guard ------------------------------------------------------------


def test_cosine_check_passes_a_rescaled_embedding_and_reports_the_rest() -> None:
    floor = [{"embedding": [1.0, 0.0, 0.0]}, {"embedding": [0.0, 2.0, 0.0]}]
    same = check.compare_cosine(floor, [{"embedding": [3.0, 0.0, 0.0]}, {"embedding": [0.0, 0.5, 0.0001]}], "embedding")
    assert same.passed and same.min_cosine >= 0.999
    assert check.describe(same.to_dict()).startswith("min cosine")
    turned = check.compare_cosine(floor, [{"embedding": [1.0, 0.0, 0.0]}, {"embedding": [0.0, 1.0, 1.0]}], "embedding")
    assert not turned.passed and turned.agree == 1
    assert turned.first_mismatch == "row 1: cosine 0.7071 < 0.999"
    failed = check.compare_cosine(floor, [{"error": "HTTPError: 500"}, {"embedding": [1.0]}], "embedding")
    assert failed.agree == 0 and failed.first_mismatch == "row 0: HTTPError: 500"
    assert not failed.to_dict()["passed"]


def test_failure_reason_is_the_last_exception_in_one_line() -> None:
    log = (
        "INFO:     Waiting for application startup.\n"
        "ERROR:    Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: No onnx files found for /m and revision None\n"
        "\n"
        "ERROR:    Application startup failed. Exiting.\n"
    )
    assert infinity.failure_reason(log) == "ValueError: No onnx files found for /m and revision None"
    warning = ("WARNING  2026-01-01 00:00:00,000 infinity_emb WARNING: Optimization failed with X. Going to use the "
               "unoptimized model.          utils_optimum.py:199")
    assert infinity.warnings_of(warning) == ["Optimization failed with X. Going to use the unoptimized model."]


# -- found, skipped or refused ---------------------------------------------------


def test_missing_infinity_is_skipped_by_default_and_refused_when_named(tiny_embedding_repo, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # no .venv-infinity here
    bench = Bench(BenchOptions(repository=tiny_embedding_repo.repository, output=tmp_path / "out"))
    assert bench.find_infinity() is None
    assert set(bench.skipped) == set(ENGINES)
    assert all("not installed" in r and "make infinity" in r for r in bench.skipped.values())

    named = Bench(BenchOptions(repository=tiny_embedding_repo.repository, peers=["infinity", "floor"], peers_asked=True))
    with pytest.raises(TritonizeError) as info:
        named.find_infinity()
    assert "not installed" in info.value.message and "make infinity" in info.value.hint

    # Through the command line: one error before any server starts.
    rc = main(["bench", "--repository", str(tiny_embedding_repo.repository), "--peers", "infinity",
               "--infinity-python", str(tmp_path / "nowhere" / "python"), "--output", str(tmp_path / "out")])
    assert rc == 2
    printed = capsys.readouterr().err
    assert "Infinity is not installed" in printed and "make infinity" in printed
    assert not (tmp_path / "out" / ".run").exists()


def test_infinity_is_skipped_for_other_tasks(tiny_classifier_repo) -> None:
    bench = Bench(BenchOptions(repository=tiny_classifier_repo.repository, peers=["infinity"], peers_asked=True))
    assert bench.find_infinity() is None
    assert bench.skipped == {"infinity": "Infinity serves embeddings here; this repository's task is classification"}


def test_install_is_a_no_op_when_up_to_date(tmp_path, monkeypatch) -> None:
    venv = tmp_path / "venv"
    python = infinity.venv_python(venv)
    python.parent.mkdir(parents=True)
    python.touch()
    (venv / infinity.STAMP).write_text("\n".join(["torch==2.13.0", *infinity.REQUIREMENTS]) + "\n")
    monkeypatch.setattr(infinity.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    assert infinity.install(venv, torch="2.13.0") == python
