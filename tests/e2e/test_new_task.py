"""A task written outside tritonize, served end to end: tests/plugins/tritonize_shout (an embedding taken
`--loudness` times by a post step from its own served/ folder) is installed as a distribution that names it under
the `tritonize.tasks` entry point. `python generate.py --task shout --loudness 3` finds the task and its flag there
with no line of tritonize's edited, verifies it against sentence-transformers, and the repository it writes
answers on the local Triton, through the client's call and the API's route that the package declares, and counts
the statistic it declares.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support import REPO_ROOT
from support import statistics as statistics_support
from support.api import start_api, stop
from support.stopping import serving as served
from support.tiny_models import build_embedding_model
from tritonize import serving, tasks
from tritonize.client import TextClient
from tritonize.runtime.local import LocalRuntime

PLUGIN = REPO_ROOT / "tests" / "plugins" / "tritonize_shout"
TEXTS = ["the quiet river", "a loud crowd in the square"]

pytestmark = pytest.mark.e2e


def install(site: Path) -> None:
    """The package and the dist-info of a distribution that carries it, as an installer leaves them."""
    shutil.copytree(PLUGIN, site / PLUGIN.name, ignore=shutil.ignore_patterns("__pycache__"))
    info = site / "tritonize_shout-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tritonize-shout\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{tasks.ENTRY_POINTS}]\nshout = {PLUGIN.name}\n")


def test_a_task_from_an_installed_package_is_generated_verified_and_served(tmp_path: Path, local_options,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    install(site)
    source = build_embedding_model(tmp_path / "tiny-src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "generate.py", "--model", str(source), "--name", "tiny", "--task", "shout",
                          "--loudness", "3", "--output", str(tmp_path / "repo")], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    repo = tmp_path / "repo"
    # The post step runs the package's own module, copied byte for byte beside the shared ones it imports.
    assert filecmp.cmp(repo / "tiny_post" / "1" / "model.py", PLUGIN / "served" / "shout.py", shallow=False)
    assert filecmp.cmp(repo / "tiny_post" / "1" / "post_step.py", serving.SERVING_DIR / "post_step.py", shallow=False)
    # ... and beside serving/statistics.py, the module that declares what it counts.
    assert filecmp.cmp(repo / "tiny_post" / "1" / "shout_statistics.py", PLUGIN / "served" / "shout_statistics.py",
                       shallow=False)
    assert '"reference": "sentence-transformers, 3 times"' in (repo / "verification.json").read_text()
    assert "\nloudness: 3\n" in (repo / "tritonize.yaml").read_text()

    # This process reads the repository's answers through the same entry point.
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # the API's process finds it as this one does
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    try:
        tasks.register_installed()
        assert tasks.PACKAGES[-1] == PLUGIN.name
        from sentence_transformers import SentenceTransformer

        expected = 3 * SentenceTransformer(str(source), device="cpu").encode(TEXTS)
        with served(LocalRuntime(local_options(repo, tmp_path / "run"), quiet=True)) as endpoints:
            before = statistics_support.settled_pages(endpoints.metrics, ["tiny"])["tiny"]
            with TextClient(endpoints.grpc, "tiny", protocol="grpc") as client:
                quiet = client.shout(TEXTS, loud=False)
            after = statistics_support.settled_pages(endpoints.metrics, ["tiny"])["tiny"]
            with TextClient(endpoints.grpc, "tiny", protocol="grpc") as client:
                loud = client.shout(TEXTS)
            api = start_api(repo, endpoints.grpc)
            try:
                status, _, body = api.call("POST", "/v1/shout", {"inputs": TEXTS})
                schema = api.call("GET", "/openapi.json")[2]
            finally:
                stop(api)
        assert status == 200, body
        np.testing.assert_allclose(np.array(body["data"]), expected, atol=1e-5)
        assert "/v1/shout" in schema["paths"]
        # Its post step counted the statistic its package declares, as its own function computes it here.
        moved = statistics_support.counted(before, after)
        assert moved[("tritonize_output_shout_norm_count", ())] == len(TEXTS)
        assert moved == statistics_support.expected(repo, "tiny", {"TEXT": TEXTS})
        np.testing.assert_allclose(quiet, expected, atol=1e-5)
        expected_loud = 6 * SentenceTransformer(str(source), device="cpu").encode([t.upper() for t in TEXTS])
        np.testing.assert_allclose(loud, expected_loud, atol=1e-5)
    finally:
        for name in [m for m in sys.modules if m.startswith((PLUGIN.name, "tritonize.serving.shout"))]:
            del sys.modules[name]
