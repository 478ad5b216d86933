"""The wheel a user installs: built from this checkout, installed non-editable into a fresh virtualenv.

The fresh environment borrows the heavy dependencies (torch, onnxruntime, ...)
from the project's environment through a .pth file, but not tritonize itself,
and runs from a directory outside the checkout, so only the wheel's own files
can answer.
"""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from support import REPO_ROOT as ROOT
from support.tiny_models import build_classifier


def run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result = run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
                 cwd=out)  # the locked setuptools builds it: nothing unlocked is fetched
    log = result.stdout + result.stderr
    assert "SetuptoolsDeprecationWarning" not in log and "project.license" not in log
    (built,) = out.glob("tritonize-*.whl")
    return built


@pytest.mark.slow
def test_wheel_carries_templates_corpus_and_served_modules(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {str(p.relative_to(ROOT)) for p in (ROOT / "templates").rglob("*.j2")}
    assert templates and {f"tritonize/{t}" for t in templates} <= names
    assert {"tritonize/data/corpus_mixed.txt", "tritonize/data/serving-image.lock"} <= names
    assert {"tritonize/serving/tokenizer.py", "tritonize/serving/onnx_model.py", "tritonize/serving/batching.py"} <= names
    # Every module of the package: a package folder setup.py's find missed would not be installed.
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "tritonize").rglob("*.py") if "__pycache__" not in p.parts}
    assert modules - names == set()


@pytest.mark.slow
def test_installed_wheel_generates_from_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).stdout.strip())
    run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)
    # Dependencies from this environment; tritonize itself only from the wheel (.pth files of that folder are not run).
    (site / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")

    where = run([str(py), "-c", "import tritonize; print(tritonize.__file__)"], cwd=work, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    assert "generate" in run([str(venv / "bin" / "tritonize"), "--help"], cwd=work, env=env).stdout

    model = build_classifier(tmp_path / "tiny-cls")
    run([str(venv / "bin" / "tritonize"), "generate", "--model", str(model), "--output", "repo"], cwd=work, env=env)
    repo = work / "repo"
    assert (repo / "tiny-cls" / "config.pbtxt").is_file() and (repo / "verification.json").is_file()
    installed = Path(where).parent / "serving"
    assert filecmp.cmp(repo / "tiny-cls_tokenizer" / "1" / "model.py", installed / "tokenizer.py", shallow=False)
    assert filecmp.cmp(repo / "tiny-cls_model" / "1" / "model.py", installed / "fused_step.py", shallow=False)
    assert filecmp.cmp(repo / "tiny-cls_model" / "1" / "onnx_model.py", installed / "onnx_model.py", shallow=False)
