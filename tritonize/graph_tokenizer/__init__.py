"""The tokenizer as an ONNX graph: raw strings in, the model's token tensors out, with no Python where it serves.

A family's part turns the batch of texts into each row's tokens (wordpiece.py: BERT's WordPiece, from string
operators; bpe.py: byte-level BPE, from the tokenizer.json read by onnxruntime-extensions' `HfJsonTokenizer`), the
frame (frame.py) puts the tokenizer's special tokens around each row, cuts it at the max length and pads the batch
to a bucket, as the Python tokenizer step does. The graph is served on Triton's onnxruntime backend with the
extensions' operator library built without Python (runtime/operator_library.py).

The operators are not Hugging Face's tokenizer, so before anything is served the gate (gate.py) holds the graph's
tokens to the served tokenizer's on every verification text, the shipped corpus, adversarial texts and the
tokenizer's own added tokens; any difference, or a tokenizer no part serves, refuses the layout in one line and
the repository keeps the Python tokenizer step.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, compose, helper

from ..errors import TokenizerRefused as Refused
from ..serving.batching import ATTENTION_MASK, INPUT_IDS, ROW_FIELDS, TOKEN_COUNT, TRUNCATED
from ..serving.prefixes import exact_prefixes
from ..serving.tokenizer import TextEncoder
from ..spec import (GRAPH_LIBRARY_FILE, GRAPH_MODEL_FILE, TOKENIZER_GRAPH_FILE, WARMUP_DIR, WARMUP_TEXT,
                    WARMUP_TEXT_FILE, RepoSpec)
from .bpe import ByteLevelBPE, bpe_nodes
from .bucketed import bucketed
from .frame import TOKEN_TYPE_IDS, Template, frame_nodes
from .gate import ADVERSARIAL_TEXTS, CORPUS, checked_texts, first_difference, session
from .nodes import DOMAIN, OPSET, TEXT, prefixed, sort_nodes
from .texts import OUTPUT as CHECKED
from .texts import prefix_graph, texts_graph
from .wordpiece import WordPiece, wordpiece_nodes

__all__ = ["ADVERSARIAL_TEXTS", "CORPUS", "DOMAIN", "TOKEN_TYPE_IDS", "ByteLevelBPE", "Template", "WordPiece", "assemble",
           "build", "bucketed", "checked", "compose_model", "first_difference", "prefix_words", "session", "texts_graph",
           "tokenizer_graph", "wordpiece_nodes", "bpe_nodes"]


def tokenizer_class(folder: str | Path) -> str | None:
    """The transformers class a model folder's tokenizer_config.json names, where it has one (the family's
    conventions the operator follows: Gemma's byte fallback, Qwen's pre-tokenizer)."""
    config = Path(folder) / "tokenizer_config.json"
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, ValueError):
        return None


def family_nodes(tokenizer_file: Path, folder: Path | None = None) -> list[onnx.NodeProto]:
    """The nodes of the family's part (TEXT -> FLAT_IDS, ROW_TOKENS); refused in one line where none serves it.
    `folder`: the model folder whose tokenizer_config.json names the class (default: the tokenizer file's)."""
    model = (json.loads(Path(tokenizer_file).read_text(encoding="utf-8")).get("model") or {}).get("type")
    if model == "WordPiece":
        return wordpiece_nodes(WordPiece.read(tokenizer_file))
    return bpe_nodes(ByteLevelBPE.read(tokenizer_file, tokenizer_class(folder or Path(tokenizer_file).parent)))


def tokenizer_graph(tokenizer_file: str | Path, max_length: int, buckets: tuple[int, ...], pad_id: int,
                    with_token_types: bool, folder: str | Path | None = None) -> onnx.ModelProto:
    """TEXT [N, 1] -> input_ids, attention_mask (token_type_ids) [N, bucket] INT64, tokens [N, 1] INT32,
    truncated [N, 1] BOOL: the whole batch in one pass, each row on its own."""
    from tokenizers import Tokenizer

    return assemble(family_nodes(Path(tokenizer_file), Path(folder) if folder else None),
                    Template.of(Tokenizer.from_file(str(tokenizer_file))), max_length, buckets, pad_id, with_token_types)


def prefix_words(tokenizer_file: str | Path, max_length: int) -> int:
    """How many words the texts step reads of a long text (texts.py, `_prefix_nodes`): the max length where the
    tokenizer's prefixes are exact, else none (the whole text)."""
    return max_length if exact_prefixes(json.loads(Path(tokenizer_file).read_text(encoding="utf-8"))) else 0


def assemble(family: list[onnx.NodeProto], template: Template, max_length: int, buckets: tuple[int, ...],
             pad_id: int, with_token_types: bool) -> onnx.ModelProto:
    """A family's part (TEXT -> FLAT_IDS, ROW_TOKENS) and the frame, as one graph."""
    outputs = [INPUT_IDS, ATTENTION_MASK] + ([TOKEN_TYPE_IDS] if with_token_types else [])
    nodes = prefixed(family + frame_nodes(template, max_length, buckets, pad_id, with_token_types), "tokenizer/",
                     {TEXT, *outputs, TOKEN_COUNT, TRUNCATED})
    graph = helper.make_graph(
        sort_nodes(nodes), "tokenizer",
        [helper.make_tensor_value_info(TEXT, TensorProto.STRING, ["batch", 1])],
        [*(helper.make_tensor_value_info(o, TensorProto.INT64, ["batch", "sequence"]) for o in outputs),
         helper.make_tensor_value_info(TOKEN_COUNT, TensorProto.INT32, ["batch", 1]),
         helper.make_tensor_value_info(TRUNCATED, TensorProto.BOOL, ["batch", 1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=8)


def compose_model(tokenizer: onnx.ModelProto, model: onnx.ModelProto, token_inputs: tuple[str, ...]) -> onnx.ModelProto:
    """The tokenizer graph, then the model's: raw strings in, the model's outputs and the row outputs out."""
    model_opset = {o.domain: o.version for o in model.opset_import}
    tokenizer = onnx.version_converter.convert_version(tokenizer, model_opset.get("", OPSET)) \
        if model_opset.get("", OPSET) != OPSET else onnx.ModelProto.FromString(tokenizer.SerializeToString())
    tokenizer.ir_version = model.ir_version
    del tokenizer.opset_import[:]
    tokenizer.opset_import.extend([helper.make_opsetid("", model_opset.get("", OPSET)), helper.make_opsetid(DOMAIN, 1)])
    # onnxruntime's fusions write com.microsoft nodes without importing their domain; the merged model's check wants it
    tokenizer.opset_import.extend(helper.make_opsetid(domain, 1) for domain in sorted({n.domain for n in model.graph.node})
                                  if domain not in model_opset and domain not in ("", DOMAIN))
    # The tokenizer's outputs the model does not read go, but not their nodes: an If's branches read tensors no
    # node lists as an input, which onnx.compose's pruning would cut away.
    kept = [o for o in tokenizer.graph.output if o.name in (*token_inputs, *ROW_FIELDS)]
    del tokenizer.graph.output[:]
    tokenizer.graph.output.extend(kept)
    merged = compose.merge_models(tokenizer, model, io_map=[(n, n) for n in token_inputs])
    onnx.checker.check_model(merged, full_check=False)
    return merged


def op_library(target: Path) -> Path:
    """The served operator library (built without Python), copied where the repository ships it."""
    from ..errors import TritonizeError
    from ..runtime import operator_library

    try:
        built = operator_library.find()
    except TritonizeError as exc:
        raise Refused(f"{exc.message} ({exc.hint})") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, target)
    return target


def _warmup_file(target: Path) -> Path:
    """One BYTES element as Triton's warm-up reads it from a file: its length (4 bytes, little-endian), its bytes."""
    data = WARMUP_TEXT.encode("utf-8")
    target.write_bytes(struct.pack("<I", len(data)) + data)
    return target


def _first_step_files(repo: RepoSpec, graph: onnx.ModelProto, work: Path) -> dict[str, Path]:
    """The first step's graph, its warm-up text and the operator library, by their paths in the repository."""
    onnx.checker.check_model(graph, full_check=False)
    onnx.save(graph, str(work / repo.pipeline.first_file))
    step = repo.first_step.name
    return {f"{step}/{repo.version}/{repo.pipeline.first_file}": work / repo.pipeline.first_file,
            f"{step}/{WARMUP_DIR}/{WARMUP_TEXT_FILE}": _warmup_file(work / WARMUP_TEXT_FILE),
            f"{step}/{GRAPH_LIBRARY_FILE}": op_library(work / step / GRAPH_LIBRARY_FILE)}


def build(repo: RepoSpec, model_graph: Path, texts: list[str], work: Path, atol: float) -> dict[str, Path]:
    """The graphs of a repository that tokenizes in them, with the operator library, by their paths in it.

    Planning decided the layout (repository.planning.graph_refusal); refused here, in one line naming the first
    text that differs, unless the in-graph tokens equal the served tokenizer's on `texts` (verification's) and
    everything else the gate checks, and (where the model step tokenizes) that step's answers equal the two
    steps' within `atol`.
    """
    spec = repo.model
    names = tuple(t.name for t in repo.token_inputs)
    tokenizer = tokenizer_graph(spec.tokenizer_file, spec.max_length, repo.buckets, repo.pad_token_id,
                                TOKEN_TYPE_IDS in names, spec.source)
    encoder = TextEncoder(spec.tokenizer_file, spec.max_length, list(repo.buckets), repo.pad_token_id,
                          names + ROW_FIELDS)
    words = prefix_words(spec.tokenizer_file, spec.max_length)
    read = checked(prefix_graph(words), tokenizer) if words else tokenizer  # the long texts as the texts step cuts them
    differs = first_difference(read, encoder, checked_texts(texts, spec.tokenizer_file), names + ROW_FIELDS)
    if differs:
        raise Refused(f"the graph tokenizer's tokens differ from the served tokenizer's on {differs}")
    work.mkdir(parents=True, exist_ok=True)
    checks = texts_graph(repo.max_request_bytes, words)
    if repo.pipeline.first_file == TOKENIZER_GRAPH_FILE:  # the first step checks and tokenizes; the model step runs the model
        return _first_step_files(repo, checked(checks, tokenizer), work)
    composed = compose_model(tokenizer, bucketed(onnx.load(str(model_graph)), repo.buckets), names)
    graph_file = work / GRAPH_MODEL_FILE
    onnx.save(composed, str(graph_file))
    _check_answers(graph_file, Path(model_graph), encoder, texts, atol)
    return {**_first_step_files(repo, checks, work),
            f"{repo.model_name}/{repo.version}/{GRAPH_MODEL_FILE}": graph_file,
            f"{repo.model_name}/{GRAPH_LIBRARY_FILE}": op_library(work / repo.model_name / GRAPH_LIBRARY_FILE)}


def checked(checks: onnx.ModelProto, tokenizer: onnx.ModelProto) -> onnx.ModelProto:
    """The texts' checks, then the tokenizer: one graph, TEXT in."""
    opset = {o.domain: o.version for o in checks.opset_import}[""]
    tokenizer = onnx.version_converter.convert_version(tokenizer, opset)
    tokenizer.ir_version = checks.ir_version
    merged = compose.merge_models(checks, tokenizer, io_map=[(CHECKED, TEXT)])
    onnx.checker.check_model(merged, full_check=False)
    return merged


def _check_answers(graph_file: Path, model_graph: Path, encoder: TextEncoder, texts: list[str], atol: float) -> None:
    """The composed graph's answers against the served tokenizer feeding the model's graph, text by text."""
    import onnxruntime as ort

    composed = session(onnx.load(str(graph_file)))
    plain = ort.InferenceSession(str(model_graph), providers=["CPUExecutionProvider"])
    feeds_of = [i.name for i in plain.get_inputs()]
    outputs = [o.name for o in plain.get_outputs()]
    for text in texts:
        got = composed.run(outputs, {TEXT: np.array([[text]], dtype=object)})
        tensors = encoder.encode([text])
        want = plain.run(outputs, {n: tensors[n] for n in feeds_of})
        worst = max(float(np.abs(g.astype(np.float64) - w).max()) for g, w in zip(got, want))
        if worst > atol:
            raise Refused(f"the graph with its tokenizer answers {text!r} {worst:.2e} away from the two steps "
                          f"(allowed {atol:.0e})")
