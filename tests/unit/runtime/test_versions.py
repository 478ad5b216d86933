"""Model versions written: `generate --version N` joins a repository beside the version it serves and never
rewrites one.
"""

from __future__ import annotations

import numpy as np

from support.versions import copy_of, floor
from tritonize.cli import main
from tritonize.manifest import read_manifest
from tritonize.repository import parse_config, versions


def test_a_version_joins_beside_the_served_one_and_never_rewrites_one(tiny_embedding_repo, second_model, tmp_path, capsys) -> None:
    repo = copy_of(tiny_embedding_repo, tmp_path)
    name = tiny_embedding_repo.name
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and "/1/" in str(p)}
    assert main(["generate", "--model", str(second_model), "--output", str(repo), "--version", "2"]) == 0
    assert versions(repo) == [1, 2]
    assert {p: p.read_bytes() for p in before} == before  # version 1 untouched, byte for byte
    assert (repo / f"{name}_model/2/model.onnx").is_file() and (repo / f"{name}_tokenizer/2/tokenizer.json").is_file()
    assert (repo / f"{name}_model/2/verification.json").is_file() and (repo / f"{name}_model/1/verification.json").is_file()
    ranges = [(repo / f"{name}_model/{v}/quantization.json").read_text() for v in (1, 2)]
    assert ranges[0] != ranges[1]  # each version keeps the quantization ranges of its own graph
    ensemble = parse_config((repo / name / "config.pbtxt").read_text())
    assert [s.model_version for s in ensemble.ensemble_scheduling.step] == [2, 2]  # the texts step, the model step
    assert list(ensemble.version_policy.specific.versions) == [2]
    manifest = read_manifest(repo)
    assert manifest.options.version == 2 and manifest.model.source == str(second_model)
    assert not np.allclose(floor(repo), floor(tiny_embedding_repo.repository), atol=1e-3)  # the other model is served

    capsys.readouterr()
    assert main(["generate", "--model", str(second_model), "--output", str(repo), "--version", "2"]) == 2
    assert "already has version(s) 1, 2" in capsys.readouterr().err
    # A version whose configs differ cannot join: refused before the export, nothing written.
    assert main(["generate", "--model", str(second_model), "--output", str(repo), "--version", "3", "--max-batch-size", "8"]) == 2
    assert "differs in max_batch_size: 64 -> 8" in capsys.readouterr().err
    assert versions(repo) == [1, 2] and not (repo / f"{name}_model/3").exists()
