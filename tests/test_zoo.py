"""Every family and layout a user brings (tests/model_zoo.py), through the whole generator.

Each folder is built the way current libraries save it, then generated: its task must be the folder's own
head, and verification must pass against the model's own library (sentence-transformers' encode,
CrossEncoder.predict, or the model's transformers class). Heads tritonize cannot serve exactly are refused
with one line, never served as something else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import model_zoo
from tritonize.errors import TritonizeError
from tritonize.generate import generate
from tritonize.spec import GenerateOptions

# The zoo's task names -> what tritonize serves; None: refused (not served yet).
SERVED_AS = {"embedding": "embedding", "classification": "classification", "reranker": "rerank",
             "token-classification": None, "question-answering": None}
REFERENCE = {"embedding": "sentence-transformers", "classification": "transformers", "rerank": "sentence-transformers CrossEncoder"}


@pytest.fixture(scope="module")
def zoo_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.mark.parametrize("entry", model_zoo.ZOO, ids=[e.id for e in model_zoo.ZOO])
def test_every_folder_is_served_exactly_or_refused(entry, zoo_root: Path, tmp_path: Path) -> None:
    folder = model_zoo.build(entry, zoo_root)
    options = GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"))
    task = SERVED_AS[entry.task]
    if task is None:
        with pytest.raises(TritonizeError, match="cannot serve a .* exactly") as info:
            generate(options)
        assert "\n" not in str(info.value)
        return
    repo = generate(options)
    report = json.loads((repo / "verification.json").read_text())
    assert report["task"] == task
    assert report["reference"] == REFERENCE[task]
    assert report["passed"] is True and report["stages"]["export"]["max_abs"] <= 1e-4
