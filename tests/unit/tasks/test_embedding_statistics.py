"""The embedder's drift statistic, as the steps and the API count it: each vector's cosine to the baseline's
centroid, against torch's cosine of the same rows."""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

import tritonize.serving
import tritonize.tasks.embedding.served

SERVED = ("statistics.py", "metrics.py")


def test_the_centroid_similarity_is_torchs_cosine(tmp_path: Path) -> None:
    folder = tmp_path / "version"  # as generation lays the modules out: the task's beside serving's
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name in SERVED:
        shutil.copy(Path(tritonize.serving.__file__).parent / name, folder / name)
    shutil.copy(Path(tritonize.tasks.embedding.served.__file__).parent / "embedding_statistics.py", folder)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("version.embedding_statistics")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "version" or n.startswith("version.")]:
            del sys.modules[name]
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(1500, 384)).astype(np.float32)
    vectors[7] = 0.0  # a zero vector: cosine 0, not NaN
    baseline = rng.normal(size=(200, 384)).astype(np.float32)
    context = {"centroid": module.centroid(baseline)}
    ours = module.centroid_similarity(vectors, context)
    theirs = torch.nn.functional.cosine_similarity(torch.from_numpy(vectors).double(),
                                                   torch.tensor(context["centroid"], dtype=torch.float64)[None],
                                                   dim=1, eps=1e-300).numpy()
    assert ours.dtype == np.float64 and ours.shape == (1500,)
    assert np.abs(ours - theirs).max() < 1e-7  # the centroid is recorded to 7 digits, so nearly unit length
    assert ours[7] == 0.0
