"""The tokenizer as ONNX graphs (tritonize/graph_tokenizer/): its tokens against the served tokenizer's
(serving/tokenizer.py) for every family served today, the pair trap, the texts step's checks, the model run per
bucket, and the layout `generate` writes (the default) or refuses in one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from tokenizers import Tokenizer

from support import model_zoo
from tritonize import graph_tokenizer as gt
from tritonize import repository
from tritonize.errors import TokenizerRefused, TritonizeError
from tritonize.generate import generate
from tritonize.graph_tokenizer import texts as checks
from tritonize.graph_tokenizer.gate import checked_texts
from tritonize.repository import parse_config
from tritonize.serving.batching import ROW_FIELDS
from tritonize.serving.tokenizer import TextEncoder
from tritonize.spec import (GRAPH_LIBRARY_FILE, GRAPH_MODEL_FILE, MODEL_FILE, TEXTS_GRAPH_FILE, TOKENIZER_GRAPH_FILE,
                            WARMUP_DIR, WARMUP_TEXT, WARMUP_TEXT_FILE, default_buckets)
from tritonize.spec.options import GenerateOptions, Overrides

MAX_LENGTH = 256
TOKENS = ("input_ids", "attention_mask", "token_type_ids")
# The zoo's tokenizer families: served in graphs, exactly; refused by their kind (Unigram, in one line); refused by
# the gate (a text where the operator parts from tokenizers: SentencePiece's Metaspace BPE).
EXACT = ("bert", "distilbert", "electra", "roberta", "modernbert", "qwen2", "qwen3", "gemma2", "gemma3")
UNIGRAM = ("xlm-roberta", "camembert", "albert", "deberta-v2", "t5")
PARTS = ("llama", "mistral")


def _pair(tokenizer_file: Path, names: tuple[str, ...] = TOKENS, max_length: int = MAX_LENGTH) -> tuple:
    """The in-graph tokenizer and the served one, for a tokenizer.json."""
    buckets = default_buckets(max_length)
    graph = gt.tokenizer_graph(tokenizer_file, max_length, buckets, 0, "token_type_ids" in names)
    return graph, TextEncoder(str(tokenizer_file), max_length, list(buckets), 0, names + ROW_FIELDS)


@pytest.fixture(scope="module")
def minilm(minilm_folder: Path) -> tuple:
    return _pair(minilm_folder / "tokenizer.json")


def _run(graph: onnx.ModelProto, texts: list) -> dict[str, np.ndarray]:
    batch = np.array(texts, dtype=object).reshape(-1, 1)
    return dict(zip([o.name for o in graph.graph.output], gt.session(graph).run(None, {gt.TEXT: batch})))


def test_in_graph_tokens_equal_the_served_tokenizers_on_the_adversarial_set(minilm) -> None:
    """Uncased MiniLM: accents, CJK, emoji, controls, zero-width, whitespace runs, special tokens in the text,
    texts past the max length: ids, masks, type ids, counts and truncated flags equal, alone and as one batch."""
    graph, encoder = minilm
    texts = list(gt.ADVERSARIAL_TEXTS) + gt.CORPUS.read_text(encoding="utf-8").splitlines()
    assert gt.first_difference(graph, encoder, texts, TOKENS + ROW_FIELDS) is None
    out = _run(graph, list(gt.ADVERSARIAL_TEXTS))
    assert out["truncated"].any() and not out["truncated"].all()  # the set holds texts past the max length
    assert out["tokens"].max() == MAX_LENGTH


@pytest.mark.parametrize("family", EXACT)
def test_each_family_served_in_graphs_gives_the_served_tokenizers_tokens(family: str, tmp_path: Path) -> None:
    """WordPiece and byte-level BPE (RoBERTa, ModernBERT with its lstrip [MASK], Qwen's NFC and regex split,
    Gemma's byte fallback): every text the gate checks, the family's own added tokens written in texts included,
    equal tokens, counts and flags; and the row outputs say something (some texts are cut)."""
    model_zoo.build_tokenizer(tmp_path, family)
    names = TOKENS if model_zoo.FAMILIES[family].has_token_type_ids else TOKENS[:2]
    graph, encoder = _pair(tmp_path / "tokenizer.json", names, max_length=64)
    texts = checked_texts(list(model_zoo.CORPUS), tmp_path / "tokenizer.json")
    assert any(Tokenizer.from_file(str(tmp_path / "tokenizer.json")).token_to_id(t) is not None
               for t in json.loads((tmp_path / "tokenizer.json").read_text())["added_tokens"][0]["content"].split())
    assert gt.first_difference(graph, encoder, texts, names + ROW_FIELDS) is None
    assert _run(graph, texts)["truncated"].any()
    # and read as the texts step reads them: a long text from its first max length words, where that is exact
    words = gt.prefix_words(tmp_path / "tokenizer.json", 64)
    if words:
        assert gt.first_difference(gt.checked(checks.prefix_graph(words), graph), encoder, texts,
                                   names + ROW_FIELDS) is None
        (cut,) = gt.session(checks.prefix_graph(words)).run(None, {gt.TEXT: np.array(texts, dtype=object)[:, None]})
        assert sum(a != b for a, b in zip(cut.ravel(), texts)) >= 2  # some texts were cut, not all


@pytest.mark.parametrize("family", UNIGRAM)
def test_a_unigram_tokenizer_is_refused_in_one_line_saying_why(family: str, tmp_path: Path) -> None:
    model_zoo.build_tokenizer(tmp_path, family)
    with pytest.raises(TokenizerRefused) as refused:
        gt.tokenizer_graph(tmp_path / "tokenizer.json", 64, default_buckets(64), 0, False)
    message = str(refused.value)
    assert "\n" not in message and "Unigram" in message and "float32" in message


@pytest.mark.parametrize("family", PARTS)
def test_a_family_where_the_operator_parts_from_tokenizers_is_caught_by_the_gate(family: str, tmp_path: Path) -> None:
    """SentencePiece-style BPE (Metaspace): the graph builds, and the gate finds a text it tokenizes otherwise."""
    model_zoo.build_tokenizer(tmp_path, family)
    graph, encoder = _pair(tmp_path / "tokenizer.json", TOKENS[:2], max_length=64)
    found = gt.first_difference(graph, encoder, checked_texts([], tmp_path / "tokenizer.json"), TOKENS[:2] + ROW_FIELDS)
    assert found is not None and "input_ids" in found


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
    template = gt.Template.of(Tokenizer.from_file(str(minilm_folder / "tokenizer.json")))
    graph = gt.assemble(gt.wordpiece_nodes(bare), template, MAX_LENGTH, default_buckets(MAX_LENGTH), 0, True)
    assert gt.first_difference(graph, encoder, ["Ελληνικά"], TOKENS) is not None


def test_a_batch_of_two_texts_is_two_rows_never_a_pair(minilm) -> None:
    """The operator reads two strings as a text pair; the graph tokenizes each row on its own."""
    graph, encoder = minilm
    texts = ["The first text.", "A second, longer text than the first."]
    both = _run(graph, texts)
    assert both["input_ids"].shape[0] == 2
    assert (both["token_type_ids"] == 0).all()  # a pair would give the second text type 1
    for k, text in enumerate(texts):
        alone = _run(graph, [text])
        width = alone["input_ids"].shape[1]
        assert np.array_equal(both["input_ids"][k, :width], alone["input_ids"][0])
        assert int(both["tokens"][k, 0]) == int(alone["tokens"][0, 0]) == len(encoder.tokenizer.encode(text).ids)


def test_the_whole_batch_goes_in_one_pass_without_a_loop_or_a_large_pattern(minilm) -> None:
    """What keeps the in-graph tokenizer cheap a row: no Loop over texts or pieces (the texts step's one If skips
    the cut of long texts where a batch has none), and no pattern the extensions would compile large on every
    call (the class of all dropped characters cost ~200 µs a call)."""
    graph, _ = minilm
    step = checks.texts_graph(2 << 20, MAX_LENGTH)
    branches = [a.g for n in step.graph.node if n.op_type == "If" for a in n.attribute]
    nodes = list(graph.graph.node) + list(step.graph.node) + [n for b in branches for n in b.node]
    ops = {n.op_type for n in nodes}
    assert not ops & {"Loop", "Scan"} and "WordpieceTokenizer" in ops
    constants = {n.output[0]: n.attribute[0].t for n in nodes if n.op_type == "Constant"}
    patterns = [constants[i].string_data[0] for n in nodes if n.op_type.startswith("StringRegex")
                for i in n.input[1:] if i in constants]
    patterns += [a.s for n in nodes if n.op_type == "RegexFullMatch" for a in n.attribute if a.name == "pattern"]
    assert patterns and max(len(p) for p in patterns) < 1000


def test_the_texts_step_reads_a_long_text_from_its_exact_prefix(minilm, minilm_folder: Path) -> None:
    """A 2 MB text leaves the texts step as its first max length words (each holds a letter, a digit or a printable
    ASCII character, so at least one token each), and its tokens are the whole text's. Texts whose words may hold no token (runs
    of spaces, only accents), whose cut would fall inside a word the Python step would not cut at, or that are
    not that long, leave whole."""
    graph, encoder = minilm
    words = gt.prefix_words(minilm_folder / "tokenizer.json", MAX_LENGTH)
    assert words == MAX_LENGTH
    huge = ("short words " * 200_000)[:2_000_000]
    kept = ["a short text", "Accentuée " * 400, " ".join(["x"] * (MAX_LENGTH + checks.CUTS)) + " tail",
            "  ".join(["word"] * 600), ("x" * 200 + " ") * 60]
    texts = [huge, " ".join(["wörd"] * 600), "a日本 東京ab " * 200, *kept]
    step = checks.texts_graph(2 << 20, words)
    (read,) = gt.session(step).run(None, {gt.TEXT: np.array(texts, dtype=object)[:, None]})
    assert read[0, 0] == " ".join(["short", "words"] * (MAX_LENGTH // 2))
    assert read[1, 0] == " ".join(["wörd"] * MAX_LENGTH)
    assert read[2, 0] == " ".join(["a日本", "東京ab"] * (MAX_LENGTH // 2))  # words of letters: tokens each
    # the first boundary at or after the max length: "a" ends no prefix, "an" does
    (late,) = gt.session(step).run(None, {gt.TEXT: np.array([[("a " * MAX_LENGTH) + "an end " * 300]], dtype=object)})
    assert late[0, 0] == "a " * MAX_LENGTH + "an"
    assert list(read[3:, 0]) == kept
    assert gt.first_difference(gt.checked(checks.prefix_graph(words), graph), encoder, texts,
                               TOKENS + ROW_FIELDS) is None


def test_the_texts_own_marks_stay_in_their_row(minilm) -> None:
    """The graph ends each row with a control character and writes special tokens as control-character words;
    the same characters written in a text are dropped as the normalizer drops them, and shift no other row."""
    graph, encoder = minilm
    texts = ["a\x01b", "\x020 \x02100 [CLS]", "", "c\x03d \ue000e"]
    assert gt.first_difference(graph, encoder, texts, TOKENS + ROW_FIELDS) is None
    out = _run(graph, texts)
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


def _refusal(graph: onnx.ModelProto, batch: np.ndarray) -> str | None:
    try:
        gt.session(graph).run(None, {gt.TEXT: batch.reshape(-1, 1)})
    except Exception as exc:  # noqa: BLE001 - onnxruntime's failure of the node named for the refusal
        return str(exc).split("Name:'", 1)[1].split("' Status Message:", 1)[0]
    return None


def test_the_texts_step_refuses_as_the_python_step_and_hands_the_rest_on_unchanged() -> None:
    """The byte bound first, then UTF-8, then blank texts (serving/texts.py's order and words); each refusal
    names what was refused and what to send; what passes comes out as it went in."""
    graph = checks.texts_graph(40)
    texts = np.array(["A man is eating food.", "Café déjà vu", "😀"], dtype=object)
    out = gt.session(graph).run(None, {gt.TEXT: texts.reshape(-1, 1)})[0]
    assert out.reshape(-1).tolist() == texts.tolist()
    assert _refusal(graph, np.array(["  \t\u3000\u00a0"], dtype=object)) == checks.BLANK
    assert _refusal(graph, np.array(["ok", ""], dtype=object)) == checks.BLANK
    assert _refusal(graph, np.array([b"ok \xc3\x28"], dtype="S6")) == checks.NOT_UTF8  # raw bytes: not UTF-8
    assert _refusal(graph, np.array(["x" * 41], dtype=object)) == checks.TOO_LARGE.format(limit=40)
    assert _refusal(graph, np.array([b"\xff" * 50], dtype="S50")) == checks.TOO_LARGE.format(limit=40)  # size first
    assert _refusal(graph, np.array(["\u200b"], dtype=object)) is None  # what Python's strip() keeps is no blank
    unbounded = checks.texts_graph(0)
    assert _refusal(unbounded, np.array(["x" * 1000], dtype=object)) is None
    assert "StringRegexSplitWithOffsets" not in {n.op_type for n in unbounded.graph.node}


def test_the_model_runs_once_per_bucket_on_rows_cut_to_their_longest(minilm) -> None:
    """A batch of mixed lengths: each row's answer is its answer alone, bit for bit, and each bucket's rows run
    at their own longest row's width (a model that reports its input's width shows it)."""
    from onnx import TensorProto, helper

    tokenizer, _ = minilm
    ids, mask = (helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
                 for n in ("input_ids", "attention_mask"))
    out = helper.make_tensor_value_info("width", TensorProto.INT64, ["batch", 2])
    model = helper.make_model(helper.make_graph(  # each row: its width as run, and the sum of its ids
        [helper.make_node("Shape", ["input_ids"], ["shape"]),
         helper.make_node("Slice", ["shape", "one", "two"], ["w"]),
         helper.make_node("Shape", ["input_ids"], ["rows"], end=1),
         helper.make_node("Expand", ["w", "rows"], ["w_rows"]),
         helper.make_node("ReduceSum", ["input_ids", "one"], ["s"], keepdims=0),
         helper.make_node("Unsqueeze", ["w_rows", "one"], ["w_col"]),
         helper.make_node("Unsqueeze", ["s", "one"], ["s_col"]),
         helper.make_node("Concat", ["w_col", "s_col"], ["width"], axis=1)],
        "widths", [ids, mask], [out], [onnx.numpy_helper.from_array(np.array([1], np.int64), "one"),
                                       onnx.numpy_helper.from_array(np.array([2], np.int64), "two")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    buckets = default_buckets(MAX_LENGTH)
    composed = gt.compose_model(tokenizer, gt.bucketed(model, buckets), ("input_ids", "attention_mask"))
    texts = ["short", "word " * 100, "a little longer than short", "word " * 40]
    both = _run(composed, texts)
    alone = [_run(composed, [t]) for t in texts]
    assert [int(a["tokens"][0, 0]) for a in alone] == both["tokens"].ravel().tolist() == [3, 102, 7, 42]
    assert both["width"][:, 1].tolist() == [int(a["width"][0, 1]) for a in alone]  # the same ids, row by row
    assert both["width"][:, 0].tolist() == [7, 102, 7, 42]  # bucket 16: its rows at 7; 128 at 102; 64 at 42


def _generated(tmp_path: Path, entry: str, **options) -> Path:
    folder = model_zoo.build(entry, tmp_path)
    return Path(generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"), **options)))


def test_generate_writes_a_python_step_where_the_graph_is_refused(tmp_path: Path, capsys) -> None:
    repo = _generated(tmp_path, "xlm-roberta-st-mean")
    said = capsys.readouterr().err
    assert "no Python per request) refused" in said and "Unigram" in said
    model = parse_config((repo / "zoo_model" / "config.pbtxt").read_text())
    assert [i.name for i in model.input] == ["input_ids", "attention_mask"] and not model.model_operations.op_library_filename
    ensemble = parse_config((repo / "zoo" / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["zoo_tokenizer", "zoo_model", "zoo_statistics"]
    assert "tokenizer: python" in (repo / "tritonize.yaml").read_text()


def test_generate_writes_the_graph_layout_by_default_with_no_python(tmp_path: Path) -> None:
    """A texts step (a graph, each request on its own) and the model step tokenizing in its graph; no fused
    variant, no Python module anywhere, the operator library named by its bare name and shipped beside each
    step that loads it, and the texts step's warm-up text."""
    repo = _generated(tmp_path, "bert-st-mean")
    first = parse_config((repo / "zoo_tokenizer" / "config.pbtxt").read_text())
    assert (first.platform, first.default_model_filename) == ("onnxruntime_onnx", TEXTS_GRAPH_FILE)
    assert not first.HasField("dynamic_batching")  # each request alone: one it refuses fails alone
    assert [o.name for o in first.output] == ["TEXT_CHECKED"]
    assert first.model_warmup[0].inputs["TEXT"].input_data_file == WARMUP_TEXT_FILE
    warm = (repo / "zoo_tokenizer" / WARMUP_DIR / WARMUP_TEXT_FILE).read_bytes()
    assert warm[4:].decode() == WARMUP_TEXT and int.from_bytes(warm[:4], "little") == len(WARMUP_TEXT)
    model = parse_config((repo / "zoo_model" / "config.pbtxt").read_text())
    assert model.default_model_filename == GRAPH_MODEL_FILE
    assert [i.name for i in model.input] == ["TEXT"]
    assert [o.name for o in model.output][-2:] == ["tokens", "truncated"]
    # bounded, as every step: two one-thread instances, so the batcher's lost wake-up has a second one
    assert [(g.count, g.kind) for g in model.instance_group] == [(2, model.instance_group[0].KIND_CPU)]
    assert model.parameters["intra_op_thread_count"].string_value == "1"
    policy = model.dynamic_batching.default_queue_policy
    assert policy.max_queue_size >= 512 and policy.timeout_action == policy.REJECT
    for step in (first, model):
        assert list(step.model_operations.op_library_filename) == [GRAPH_LIBRARY_FILE]
        assert (repo / step.name / GRAPH_LIBRARY_FILE).is_file()
    ensemble = parse_config((repo / "zoo" / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["zoo_tokenizer", "zoo_model"]
    assert not list(repo.glob("*/configs")) and not list(repo.glob("**/*.py"))
    assert (repo / "zoo_model" / "1" / MODEL_FILE).is_file()  # what verification and the in-process chain run
    assert "tokenizer: graph" in (repo / "tritonize.yaml").read_text()
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    with pytest.raises(TritonizeError, match="--no-truncate refuses over-long texts") as refused:  # another layout
        repository.reconfigure(repo, Overrides(truncate=False))
    assert "--tokenizer python" in refused.value.hint
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before  # nothing written
    repository.reconfigure(repo, Overrides(max_queue_delay_us=300))  # the same layout: configs rewritten
    assert parse_config((repo / "zoo_model" / "config.pbtxt").read_text()).dynamic_batching.max_queue_delay_microseconds == 300
    repository.reconfigure(repo, Overrides(max_queue_size=0))  # no bound asked: one instance on every core
    unbounded = parse_config((repo / "zoo_model" / "config.pbtxt").read_text())
    assert not unbounded.dynamic_batching.HasField("default_queue_policy")  # Triton's batcher prefetches
    assert [g.count for g in unbounded.instance_group] == [1]
    assert unbounded.parameters["intra_op_thread_count"].string_value == "0"


def test_a_task_with_a_post_step_is_refused_for_the_graph_layout(tmp_path: Path, capsys) -> None:
    repo = _generated(tmp_path, "bert-splade", skip_verify=True)
    assert "TokenizeModelPost" in capsys.readouterr().err
    assert not (repo / "zoo_model" / GRAPH_LIBRARY_FILE).exists()


def test_pairs_are_served_by_the_python_step_saying_why(tmp_path: Path, capsys) -> None:
    repo = _generated(tmp_path, "bert-cross-encoder", skip_verify=True)
    assert "reads QUERY, TEXT" in capsys.readouterr().err
    assert (repo / "zoo_tokenizer" / "1" / "model.py").is_file()


def test_a_gpu_gets_the_tokenizers_graph_as_a_cpu_step_before_the_model_step(tmp_path: Path) -> None:
    """On a GPU the tokenizer's operators stay off the CUDA provider (spec/pipeline.py's TokenizeGraphStep); the
    step checks each request's texts first and runs each request on its own, padded to its bucket."""
    repo = _generated(tmp_path, "bert-st-mean", device="gpu")
    first = parse_config((repo / "zoo_tokenizer" / "config.pbtxt").read_text())
    assert (first.platform, first.default_model_filename) == ("onnxruntime_onnx", TOKENIZER_GRAPH_FILE)
    assert [g.kind for g in first.instance_group] == [first.instance_group[0].KIND_CPU]
    assert not first.HasField("dynamic_batching")
    assert list(first.model_operations.op_library_filename) == [GRAPH_LIBRARY_FILE]
    assert [o.name for o in first.output][-2:] == ["tokens", "truncated"]
    assert sorted(p.name for p in (repo / "zoo_tokenizer" / "1").iterdir()) == \
        ["statistics.json", "tokenizer.json", TOKENIZER_GRAPH_FILE]  # no Python runs there
    graph = onnx.load(str(repo / "zoo_tokenizer" / "1" / TOKENIZER_GRAPH_FILE))
    assert _refusal(graph, np.array(["  "], dtype=object)) == checks.BLANK
    model = parse_config((repo / "zoo_model" / "config.pbtxt").read_text())
    assert (model.default_model_filename, [g.kind for g in model.instance_group]) == \
        ("model.onnx", [model.instance_group[0].KIND_GPU] * len(model.instance_group))
    assert not list(model.model_operations.op_library_filename)
    ensemble = parse_config((repo / "zoo" / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["zoo_tokenizer", "zoo_model"]
    assert not list(repo.glob("*/configs"))


def test_a_buckets_rows_run_in_runs_of_the_token_budget(minilm) -> None:
    """Rows of one bucket beyond the budget run in several runs of at most budget / bucket rows (one at least),
    in the order they came; each row's answer is still its answer alone."""
    from onnx import TensorProto, helper

    tokenizer, _ = minilm
    ids, mask = (helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
                 for n in ("input_ids", "attention_mask"))
    out = helper.make_tensor_value_info("runs", TensorProto.INT64, ["batch", 2])
    model = helper.make_model(helper.make_graph(  # each row: how many rows its run held, and the sum of its ids
        [helper.make_node("Shape", ["input_ids"], ["rows"], end=1),
         helper.make_node("Expand", ["rows", "rows"], ["n_rows"]),
         helper.make_node("ReduceSum", ["input_ids", "one"], ["s"], keepdims=0),
         helper.make_node("Unsqueeze", ["n_rows", "one"], ["n_col"]),
         helper.make_node("Unsqueeze", ["s", "one"], ["s_col"]),
         helper.make_node("Concat", ["n_col", "s_col"], ["runs"], axis=1)],
        "runs", [ids, mask], [out], [onnx.numpy_helper.from_array(np.array([1], np.int64), "one")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    buckets = default_buckets(MAX_LENGTH)
    assert buckets[0] == 16 and 128 in buckets
    composed = gt.compose_model(tokenizer, gt.bucketed(model, buckets, run_tokens=32), ("input_ids", "attention_mask"))
    texts = ["one", "word " * 100, "two words", "three short words", "four", "word " * 90, "five"]
    both = _run(composed, texts)
    alone = [_run(composed, [t]) for t in texts]
    assert both["runs"][:, 1].tolist() == [int(a["runs"][0, 1]) for a in alone]
    # 16-token rows, 2 a run: rows 0 and 2, then 3 and 4, then 6 alone; 128-token rows, 0 by the budget: 1 a run
    assert both["runs"][:, 0].tolist() == [2, 1, 2, 2, 2, 1, 1]
    whole = gt.compose_model(tokenizer, gt.bucketed(model, buckets, run_tokens=0), ("input_ids", "attention_mask"))
    assert _run(whole, texts)["runs"][:, 0].tolist() == [5, 2, 5, 5, 5, 2, 5]


def _row_graph(width_dependent: bool) -> onnx.ModelProto:
    """[rows, width] ids and mask -> [rows, 1] float: each row's ids summed where its mask is set, or (width_dependent)
    the batch's width, which a run cut to its longest row changes."""
    from onnx import TensorProto, helper

    ids, mask = (helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
                 for n in ("input_ids", "attention_mask"))
    out = helper.make_tensor_value_info("value", TensorProto.FLOAT, ["batch", 1])
    if width_dependent:
        nodes = [helper.make_node("Shape", ["input_ids"], ["shape"]),
                 helper.make_node("Gather", ["shape", "one_scalar"], ["width"]),
                 helper.make_node("Mul", ["attention_mask", "zero"], ["zeros"]),
                 helper.make_node("ReduceSum", ["zeros", "one"], ["z"], keepdims=1),
                 helper.make_node("Add", ["z", "width"], ["w"]),
                 helper.make_node("Cast", ["w"], ["value"], to=TensorProto.FLOAT)]
    else:
        nodes = [helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
                 helper.make_node("ReduceSum", ["kept", "one"], ["s"], keepdims=1),
                 helper.make_node("Cast", ["s"], ["value"], to=TensorProto.FLOAT)]
    weights = [onnx.numpy_helper.from_array(np.array([1], np.int64), "one"),
               onnx.numpy_helper.from_array(np.array(1, np.int64), "one_scalar"),
               onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")]
    return helper.make_model(helper.make_graph(nodes, "rows", [ids, mask], [out], weights),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_model_step_in_runs_answers_as_its_graph_or_is_refused(tmp_path: Path) -> None:
    """Behind the Python tokenizer step, the model step's graph in runs (RUNS_MODEL_FILE) is written only where it
    answers a batch of mixed lengths as the plain graph does; a graph whose answer moves with the batch's width is
    refused in one line."""
    from tritonize.graph_tokenizer.bucketed import runs_graph

    lengths = [3, 16, 40, 9, 128, 2]
    mask = np.array([[1] * n + [0] * (128 - n) for n in lengths], np.int64)
    feeds = {"input_ids": (np.arange(128, dtype=np.int64) + 1) * mask, "attention_mask": mask}
    buckets = (16, 32, 64, 128)
    exact = tmp_path / "exact.onnx"
    onnx.save(_row_graph(False), str(exact))
    written = runs_graph(exact, buckets, feeds, tmp_path / "runs" / "model_runs.onnx", 1e-4)
    answer = ort_session(written).run(None, feeds)[0]
    assert answer[:, 0].tolist() == [n * (n + 1) / 2 for n in lengths] and written.is_file()
    moving = tmp_path / "moving.onnx"
    onnx.save(_row_graph(True), str(moving))
    with pytest.raises(TritonizeError, match="answers value otherwise than its graph") as refused:
        runs_graph(moving, buckets, feeds, tmp_path / "runs2" / "model_runs.onnx", 1e-4)
    assert "\n" not in str(refused.value.message)


def ort_session(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
