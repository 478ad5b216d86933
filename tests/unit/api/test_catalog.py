"""What the catalog tells the routes about a served model: here, whether its ensemble can cut a text at its start
or into windows (the tokenizer step's request parameters)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from support.tiny_models import build_embedding_model
from tritonize.api.catalog import Catalog, ServedModel
from tritonize.api.errors import ApiError
from tritonize.api.routes.parameters import cut_at_start, direction_of
from tritonize.generate import generate
from tritonize.spec.options import GenerateOptions


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> ServedModel:
    base = tmp_path_factory.mktemp("catalog")
    model = build_embedding_model(base / "tiny")
    repo = generate(GenerateOptions(model=str(model), name="tiny", output=str(base / "repo"), tokenizer="python"))
    (found,) = Catalog.read(repo).models
    return found


def test_a_python_tokenizer_step_cuts_at_the_start_when_asked(served: ServedModel) -> None:
    assert served.cut_refusal is None
    assert cut_at_start(served, "truncate", "START") == {"truncation_direction": "left"}
    assert direction_of(served, "Left") == {"truncation_direction": "left"}
    assert direction_of(served, "right") is None


def test_a_graph_that_tokenizes_or_an_earlier_step_is_refused_in_one_line(served: ServedModel,
                                                                         tmp_path: Path) -> None:
    manifest = served.manifest
    graph = ServedModel(dataclasses.replace(manifest, options=dataclasses.replace(manifest.options, tokenizer="graph")),
                        served.repository)
    with pytest.raises(ApiError) as refused:
        cut_at_start(graph, "truncate", "START")
    assert refused.value.status == 400 and refused.value.message == (
        "truncate START is not served for tiny: it tokenizes in ONNX graphs, which read every text from its start "
        "(generate it with --tokenizer python for its Python step, which cuts as a request asks)")
    earlier = ServedModel(dataclasses.replace(manifest, capabilities=None), served.repository)
    with pytest.raises(ApiError, match=r"written by an earlier tritonize, .*\(generate the repository again\)$"):
        direction_of(earlier, "left")


def test_the_capability_is_the_manifests_and_survives_its_file(served: ServedModel) -> None:
    """Written by generate from the pipeline's declaration, read back from tritonize.yaml: no served file is read."""
    assert served.manifest.capabilities == ("request_cuts",)
    (again,) = Catalog.read(served.repository).models
    assert again.manifest.capabilities == ("request_cuts",) and again.cut_refusal is None
    none = ServedModel(dataclasses.replace(served.manifest, capabilities=()), served.repository)
    assert none.cut_refusal == "its embedding steps read every text from its start"
