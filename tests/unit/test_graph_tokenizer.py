"""The tokenizer inside the ONNX graph (tritonize/graph_tokenizer.py): its tokens against the served tokenizer's
(serving/tokenizer.py), the pair trap, and the layout `generate --tokenizer graph` writes or refuses."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from support import model_zoo
from tritonize import graph_tokenizer as gt
from tritonize.errors import TokenizerRefused
from tritonize.generate import generate
from tritonize.repository import parse_config
from tritonize.serving.batching import ROW_FIELDS
from tritonize.serving.tokenizer import TextEncoder
from tritonize.spec import GRAPH_LIBRARY_FILE, GRAPH_MODEL_FILE, TOKENIZER_GRAPH_FILE, default_buckets
from tritonize.spec.options import GenerateOptions

MAX_LENGTH = 256
TOKENS = ("input_ids", "attention_mask", "token_type_ids")


def _pair(tokenizer_file: Path) -> tuple:
    """The in-graph tokenizer and the served one, for a tokenizer.json."""
    buckets = default_buckets(MAX_LENGTH)
    graph = gt.tokenizer_graph(gt.WordPiece.read(tokenizer_file), MAX_LENGTH, buckets, 0, True)
    return graph, TextEncoder(str(tokenizer_file), MAX_LENGTH, list(buckets), 0, TOKENS + ROW_FIELDS)


@pytest.fixture(scope="module")
def minilm(minilm_folder: Path) -> tuple:
    return _pair(minilm_folder / "tokenizer.json")


def _corpus() -> list[str]:
    return gt.CORPUS.read_text(encoding="utf-8").splitlines()


def test_in_graph_tokens_equal_the_served_tokenizers_on_the_adversarial_set(minilm) -> None:
    """Uncased MiniLM: accents, CJK, emoji, controls, zero-width, whitespace runs, special tokens in the text,
    texts past the max length: ids, masks, type ids, counts and truncated flags equal, alone and as one batch."""
    graph, encoder = minilm
    texts = list(gt.ADVERSARIAL_TEXTS) + _corpus()
    assert gt.first_difference(graph, encoder, texts, TOKENS + ROW_FIELDS) is None
    run = gt.session(graph)
    out = dict(zip([o.name for o in graph.graph.output],
                   run.run(None, {gt.TEXT: np.array(list(gt.ADVERSARIAL_TEXTS), dtype=object).reshape(-1, 1)})))
    assert out["truncated"].any() and not out["truncated"].all()  # the set holds texts past the max length
    assert out["tokens"].max() == MAX_LENGTH


def test_a_cased_vocabulary_keeps_case_and_accents_as_the_served_tokenizer(minilm_folder: Path, tmp_path: Path) -> None:
    spec = json.loads((minilm_folder / "tokenizer.json").read_text(encoding="utf-8"))
    spec["normalizer"].update(lowercase=False, strip_accents=False)
    cased = tmp_path / "tokenizer.json"
    cased.write_text(json.dumps(spec), encoding="utf-8")
    graph, encoder = _pair(cased)
    assert gt.first_difference(graph, encoder, list(gt.ADVERSARIAL_TEXTS), TOKENS + ROW_FIELDS) is None
    ids = encoder.encode(["CAFÉ Ελληνικά"])["input_ids"][0]
    assert 100 in ids  # the uncased vocabulary has no "CAFÉ": case was kept, so the comparison meant something


def test_the_operators_own_normalizer_would_differ(minilm_folder: Path, minilm) -> None:
    """Why the graph normalizes first: the operators alone neither lowercase nor strip accents beyond Latin."""
    _, encoder = minilm
    bare = dataclasses.replace(gt.WordPiece.read(minilm_folder / "tokenizer.json"), mapped="A\ta")
    graph = gt.tokenizer_graph(bare, MAX_LENGTH, default_buckets(MAX_LENGTH), 0, True)
    assert gt.first_difference(graph, encoder, ["Ελληνικά"], TOKENS) is not None


def test_a_batch_of_two_texts_is_two_rows_never_a_pair(minilm) -> None:
    """The operator reads two strings as a text pair; the graph tokenizes each row on its own."""
    graph, encoder = minilm
    run = gt.session(graph)
    names = [o.name for o in graph.graph.output]
    texts = ["The first text.", "A second, longer text than the first."]
    both = dict(zip(names, run.run(None, {gt.TEXT: np.array(texts, dtype=object).reshape(2, 1)})))
    assert both["input_ids"].shape[0] == 2
    assert (both["token_type_ids"] == 0).all()  # a pair would give the second text type 1
    for k, text in enumerate(texts):
        alone = dict(zip(names, run.run(None, {gt.TEXT: np.array([[text]], dtype=object)})))
        width = alone["input_ids"].shape[1]
        assert np.array_equal(both["input_ids"][k, :width], alone["input_ids"][0])
        assert int(both["tokens"][k, 0]) == int(alone["tokens"][0, 0]) == len(encoder.tokenizer.encode(text).ids)


def test_a_tokenizer_other_than_wordpiece_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = model_zoo.build("xlm-roberta-st-mean", tmp_path)
    with pytest.raises(TokenizerRefused) as refused:
        gt.WordPiece.read(folder / "tokenizer.json")
    message = str(refused.value)
    assert "\n" not in message and "Unigram" in message and gt.SUPPORTED in message


def test_generate_writes_a_python_step_where_the_graph_is_refused(tmp_path: Path, capsys) -> None:
    folder = model_zoo.build("xlm-roberta-st-mean", tmp_path)
    repo = Path(generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"),
                                         tokenizer="graph")))
    said = capsys.readouterr().err
    assert "--tokenizer graph refused" in said and "Unigram" in said
    model = parse_config((repo / "zoo_model" / "config.pbtxt").read_text())
    assert [i.name for i in model.input] == ["input_ids", "attention_mask"] and not model.model_operations.op_library_filename
    ensemble = parse_config((repo / "zoo" / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["zoo_tokenizer", "zoo_model", "zoo_statistics"]
    assert "tokenizer: python" in (repo / "tritonize.yaml").read_text()


def test_generate_writes_the_in_graph_layout_for_a_bert_wordpiece_model(tmp_path: Path) -> None:
    folder = model_zoo.build("bert-st-mean", tmp_path)
    repo = Path(generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"),
                                         tokenizer="graph")))
    model = parse_config((repo / "zoo_model" / "config.pbtxt").read_text())
    assert model.default_model_filename == GRAPH_MODEL_FILE
    assert [i.name for i in model.input] == ["TEXT"]
    assert [o.name for o in model.output][-2:] == ["tokens", "truncated"]
    assert list(model.model_operations.op_library_filename) == [f"models/zoo_model/{GRAPH_LIBRARY_FILE}"]
    assert (repo / "zoo_model" / GRAPH_LIBRARY_FILE).is_file() and (repo / "zoo_model" / "1" / GRAPH_MODEL_FILE).is_file()
    ensemble = parse_config((repo / "zoo" / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["zoo_model"]
    fused = parse_config((repo / "zoo" / "configs" / "fused.pbtxt").read_text())
    assert [s.model_name for s in fused.ensemble_scheduling.step] == ["zoo_model"]
    assert parse_config((repo / "zoo_model" / "configs" / "fused.pbtxt").read_text()).backend == "python"


def test_a_task_with_a_post_step_is_refused_for_the_graph_layout(tmp_path: Path, capsys) -> None:
    folder = model_zoo.build("bert-splade", tmp_path)
    repo = Path(generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"),
                                         tokenizer="graph", skip_verify=True)))
    assert "TokenizeModelPost" in capsys.readouterr().err
    assert not (repo / "zoo_model" / GRAPH_LIBRARY_FILE).exists()


def test_the_whole_batch_goes_in_one_pass_without_a_loop_or_a_large_pattern(minilm) -> None:
    """What keeps the in-graph tokenizer cheap a row: no Loop over texts or pieces, and no pattern the extensions
    would compile large on every call (the class of all dropped characters cost ~200 µs a call)."""
    graph, _ = minilm
    ops = {n.op_type for n in graph.graph.node}
    assert "Loop" not in ops and "If" not in ops and "WordpieceTokenizer" in ops
    constants = {n.output[0]: n.attribute[0].t for n in graph.graph.node if n.op_type == "Constant"}
    patterns = [constants[i].string_data[0] for n in graph.graph.node if n.op_type.startswith("StringRegex")
                for i in n.input[1:] if i in constants]
    assert patterns and max(len(p) for p in patterns) < 1000


def test_the_texts_own_marks_stay_in_their_row(minilm) -> None:
    """The graph ends each row with a control character and writes special tokens as control-character words;
    the same characters written in a text are dropped as the normalizer drops them, and shift no other row."""
    graph, encoder = minilm
    texts = ["a\x01b", "\x020 \x02100 [CLS]", "", "c\x03d \ue000e"]
    assert gt.first_difference(graph, encoder, texts, TOKENS + ROW_FIELDS) is None
    out = dict(zip([o.name for o in graph.graph.output],
                   gt.session(graph).run(None, {gt.TEXT: np.array(texts, dtype=object).reshape(-1, 1)})))
    body = out["input_ids"][1][1:int(out["tokens"][1, 0]) - 1]
    assert len(body) == 3 and 0 not in body  # "0", "100", [CLS]: no [PAD] (id 0) forged from "\x020"


def test_an_added_token_holding_a_dropped_character_is_refused(minilm_folder: Path, tmp_path: Path) -> None:
    spec = json.loads((minilm_folder / "tokenizer.json").read_text(encoding="utf-8"))
    spec["added_tokens"].append({**spec["added_tokens"][0], "id": len(spec["model"]["vocab"]), "content": "[A\x01B]"})
    odd = tmp_path / "tokenizer.json"
    odd.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(TokenizerRefused) as refused:
        gt.WordPiece.read(odd)
    assert "\n" not in str(refused.value) and "drops" in str(refused.value)


def test_a_graph_whose_fusions_import_no_domain_composes_with_the_tokenizer(minilm) -> None:
    """onnxruntime's fusions write com.microsoft nodes without importing their domain; the composed graph imports it."""
    import onnx
    from onnx import TensorProto, helper

    graph, _ = minilm
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
             helper.make_node("Gelu", ["ids_f"], ["embedding"], domain="com.microsoft")]
    model = helper.make_model(helper.make_graph(
        nodes, "fused", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["n", "t"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["n", "t"])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    composed = gt.compose_model(onnx.ModelProto.FromString(graph.SerializeToString()), model, ("input_ids",))
    assert "com.microsoft" in {o.domain for o in composed.opset_import}
    texts = np.array([["a man"], [""]], dtype=object)
    got = gt.session(composed).run(["embedding", "tokens"], {"TEXT": texts})
    assert got[1].ravel().tolist() == [4, 2] and got[0].shape[0] == 2


def test_a_gpu_gets_the_tokenizers_graph_as_a_cpu_step_before_the_model_step(tmp_path: Path) -> None:
    """On a GPU the tokenizer's operators stay off the CUDA provider (spec/pipeline.py's TokenizeGraphStep)."""
    folder = model_zoo.build("bert-st-mean", tmp_path)
    repo = Path(generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"),
                                         tokenizer="graph", device="gpu")))
    first = parse_config((repo / "zoo_tokenizer" / "config.pbtxt").read_text())
    assert (first.platform, first.default_model_filename) == ("onnxruntime_onnx", TOKENIZER_GRAPH_FILE)
    assert [g.kind for g in first.instance_group] == [first.instance_group[0].KIND_CPU]
    assert list(first.model_operations.op_library_filename) == [f"models/zoo_tokenizer/{GRAPH_LIBRARY_FILE}"]
    assert [o.name for o in first.output][-2:] == ["tokens", "truncated"]
    assert sorted(p.name for p in (repo / "zoo_tokenizer" / "1").iterdir()) == \
        ["statistics.json", "tokenizer.json", TOKENIZER_GRAPH_FILE]  # no Python runs there
    assert (repo / "zoo_tokenizer" / GRAPH_LIBRARY_FILE).is_file()
    model = parse_config((repo / "zoo_model" / "config.pbtxt").read_text())
    assert (model.default_model_filename, [g.kind for g in model.instance_group]) == \
        ("model.onnx", [model.instance_group[0].KIND_GPU])
    assert not list(model.model_operations.op_library_filename)
    ensemble = parse_config((repo / "zoo" / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["zoo_tokenizer", "zoo_model"]
    fused = parse_config((repo / "zoo" / "configs" / "fused.pbtxt").read_text())
    assert [s.model_name for s in fused.ensemble_scheduling.step] == ["zoo_model"]
