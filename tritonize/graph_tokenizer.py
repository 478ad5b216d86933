"""The tokenizer inside the ONNX graph (`generate --tokenizer graph`): raw strings in, the model's answer out.

onnxruntime-extensions' `BertTokenizer` operator tokenizes a WordPiece vocabulary; its kernel reads two strings
as a text pair, so the graph tokenizes each row on its own (a Loop over the batch), cuts it at the max length as
tokenizers does (the first max_length - 1 tokens, then [SEP]), pads it, and pads the batch to the bucket of its
longest row as the Python tokenizer step does. `onnx.compose` puts the model's graph after it, so Triton's native
onnxruntime backend serves raw strings in one step.

The operator is not Hugging Face's tokenizer (accents, added tokens, whitespace differ in places), so the ids are
compared at generation with the served tokenizer's (serving/tokenizer.py) on every verification text, the shipped
corpus and ADVERSARIAL_TEXTS; any difference, or a tokenizer other than a BERT WordPiece one, refuses the layout
in one line and the repository keeps the Python tokenizer step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, compose, helper

from .errors import TritonizeError
from .serving.batching import ATTENTION_MASK, INPUT_IDS, TOKEN_COUNT, TRUNCATED
from .serving.tokenizer import TextEncoder

DOMAIN = "ai.onnx.contrib"  # onnxruntime-extensions' operators
TOKEN_TYPE_IDS = "token_type_ids"
TEXT = "TEXT"
# The operator library as the graph-tokenized model step loads it: a copy in the model step's folder, named by
# its path from the server's working directory (models/, the repository; tritonize/runtime/local.py links it).
OP_LIBRARY_FILE = "libortextensions.so"
SERVED_ROOT = "models"
GRAPH_MODEL_FILE = "model_text.onnx"  # the model step's production graph: raw strings in
SUPPORTED = "BERT WordPiece tokenizers (BertNormalizer, BertPreTokenizer, WordPiece, [CLS] text [SEP])"

# Texts where the operator and Hugging Face's tokenizer are known to part (onnxruntime-extensions issues 623,
# 852, 984): accents in cased and uncased vocabularies, CJK, emoji, control and zero-width characters, runs of
# whitespace, special tokens written in the text, and texts past any max length.
ADVERSARIAL_TEXTS: tuple[str, ...] = (
    "Café déjà vu, naïve résumé, Ångström, Øresund, São Paulo",
    "CAFÉ DÉJÀ VU ÑANDÚ ÉCOLE Ελληνικά Ἀθῆναι",
    "Ǆemal ﬁnished the ﬂight; ½ cup, ² squared, Ⅻ o'clock",
    "東京は日本の首都です。北京欢迎你！한국어 문장입니다.",
    "emoji 😀👍🏽 👨‍👩‍👧 flags 🇫🇷 and ❤️ hearts",
    "control\x00chars\x07and\x1bescapes\x7f here",
    "zero\u200bwidth\u200cjoin\u200dand\ufeffbom and soft\u00adhyphen",
    "tabs\tand\nnewlines\r\nand   runs     of\u00a0\u2003spaces   ",
    "   ",
    "",
    "[CLS] written [SEP] in the [MASK] text [PAD] [UNK]",
    "[cls] lower [sep] and [Mask]",
    "punctuation!!! ...?? (brackets) {braces} <tags> \"quotes\" 'apostrophes' — dashes – ‐",
    "numbers 3.14159 1,000,000 2024-01-01 +44(0)20 7946 0958",
    "url https://example.com/a?b=c&d=e#f and mail someone@example.org",
    "a" * 300,
    "supercalifragilisticexpialidocious " * 5,
    " ".join(["word"] * 600),
    "Accentuée " * 400,
    "日本語" * 400,
)


class Refused(TritonizeError):
    """The graph tokenizer cannot serve this model exactly: the repository keeps the Python tokenizer step."""


@dataclass(frozen=True)
class WordPiece:
    """What the operator needs of a BERT WordPiece tokenizer.json."""

    vocab: tuple[str, ...]  # by id
    lowercase: bool
    strip_accents: bool
    chinese_chars: bool
    cls_id: int
    sep_id: int
    unk_token: str

    @classmethod
    def read(cls, tokenizer_file: Path) -> WordPiece:
        """The tokenizer's settings, refused in one line where it is not a BERT WordPiece tokenizer."""
        spec = json.loads(Path(tokenizer_file).read_text(encoding="utf-8"))
        model, normalizer = spec.get("model") or {}, spec.get("normalizer") or {}
        pre, post = spec.get("pre_tokenizer") or {}, spec.get("post_processor") or {}
        found = (model.get("type"), normalizer.get("type"), pre.get("type"), post.get("type"))
        if found[:3] != ("WordPiece", "BertNormalizer", "BertPreTokenizer") or found[3] not in ("TemplateProcessing",
                                                                                               "BertProcessing"):
            raise Refused(f"the graph tokenizer serves {SUPPORTED}; this tokenizer is "
                          f"{'/'.join(str(f) for f in found)}")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise Refused(f"the graph tokenizer serves WordPiece with '##' continuations, not "
                          f"{model.get('continuing_subword_prefix')!r}")
        vocab = model["vocab"]
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise Refused("the graph tokenizer needs a WordPiece vocabulary numbered 0..n-1 without gaps")
        cls_token, sep_token = "[CLS]", "[SEP]"
        if found[3] == "BertProcessing":
            (cls_token, _), (sep_token, _) = post["cls"], post["sep"]
        else:
            single = [next(iter(p)) for p in post.get("single", [])]
            names = [p.get("SpecialToken", {}).get("id") for p in post.get("single", [])]
            if single != ["SpecialToken", "Sequence", "SpecialToken"]:
                raise Refused(f"the graph tokenizer serves texts as [CLS] text [SEP]; this template is {single}")
            cls_token, sep_token = names[0], names[2]
        lowercase = bool(normalizer.get("lowercase", True))
        accents = normalizer.get("strip_accents")
        return cls(tuple(t for t, _ in by_id), lowercase, lowercase if accents is None else bool(accents),
                   bool(normalizer.get("handle_chinese_chars", True)), vocab[cls_token], vocab[sep_token],
                   model.get("unk_token", "[UNK]"))


def _const(name: str, values, dtype=np.int64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(values, dtype=dtype), name))


def tokenizer_graph(wordpiece: WordPiece, max_length: int, buckets: tuple[int, ...], pad_id: int,
                    with_token_types: bool) -> onnx.ModelProto:
    """TEXT [N, 1] -> input_ids, attention_mask (token_type_ids), tokens [N, 1] INT32, truncated [N, 1] BOOL."""
    row_nodes = [
        helper.make_node("Unsqueeze", ["i", "axis0"], ["i1"]),
        helper.make_node("Gather", ["texts", "i1"], ["text"]),  # one string: never read as a pair
        helper.make_node("BertTokenizer", ["text"], ["ids", "types", "mask"], domain=DOMAIN,
                         vocab_file="\n".join(wordpiece.vocab), do_lower_case=int(wordpiece.lowercase),
                         strip_accents=int(wordpiece.strip_accents),
                         tokenize_chinese_chars=int(wordpiece.chinese_chars), unk_token=wordpiece.unk_token,
                         max_length=-1),
        helper.make_node("Shape", ["ids"], ["length"]),
        helper.make_node("Greater", ["length", "max_len"], ["over"]),
        helper.make_node("Slice", ["ids", "zero", "max_len"], ["kept"]),
        helper.make_node("Shape", ["kept"], ["count"]),
        helper.make_node("Sub", ["count", "one"], ["last"]),
        helper.make_node("Squeeze", ["count", "axis0"], ["count_s"]),
        helper.make_node("Range", ["zero_s", "count_s", "one_s"], ["positions"]),
        helper.make_node("Equal", ["positions", "last"], ["at_last"]),
        helper.make_node("And", ["at_last", "over"], ["closes"]),
        helper.make_node("Where", ["closes", "sep", "kept"], ["cut"]),  # a cut row ends in [SEP], as tokenizers cuts
        helper.make_node("Sub", ["max_len", "count"], ["room"]),
        helper.make_node("Concat", ["zero", "room"], ["pads"], axis=0),
        helper.make_node("Pad", ["cut", "pads", "pad_id"], ["row_ids"], mode="constant"),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    body = helper.make_graph(
        [_const("axis0", [0]), _const("one", [1]), _const("max_len", [max_length]), _const("sep", wordpiece.sep_id), _const("pad_id", pad_id), *row_nodes],
        "row",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("row_ids", TensorProto.INT64, [max_length]),
         helper.make_tensor_value_info("count", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("over", TensorProto.BOOL, [1])],
    )
    outputs = [INPUT_IDS, ATTENTION_MASK] + ([TOKEN_TYPE_IDS] if with_token_types else [])
    nodes = [  # zero, zero_s and one_s are read by the row graph too (an outer scope's names)
        _const("flat", [-1]), _const("zero", [0]), _const("zero_s", 0), _const("one_s", 1), _const("axis1", [1]),
        _const("buckets", list(buckets)), _const("beyond", max_length + 1), helper.make_node("Constant", [], ["true"],
                                                                                             value_int=1),
        helper.make_node("Cast", ["true"], ["go"], to=TensorProto.BOOL),
        helper.make_node("Reshape", [TEXT, "flat"], ["texts"]),
        helper.make_node("Shape", ["texts"], ["n1"]),
        helper.make_node("Squeeze", ["n1"], ["n"]),
        helper.make_node("Loop", ["n", "go"], ["all_ids", "counts", "overs"], body=body),
        helper.make_node("ReduceMax", ["counts"], ["longest"], keepdims=0),
        helper.make_node("GreaterOrEqual", ["buckets", "longest"], ["fits"]),
        helper.make_node("Where", ["fits", "buckets", "beyond"], ["candidates"]),
        helper.make_node("ReduceMin", ["candidates"], ["width"], keepdims=1),
        helper.make_node("Slice", ["all_ids", "zero", "width", "axis1"], [INPUT_IDS]),
        helper.make_node("Squeeze", ["width"], ["width_s"]),
        helper.make_node("Range", ["zero_s", "width_s", "one_s"], ["columns"]),
        helper.make_node("Less", ["columns", "counts"], ["inside"]),  # [width] < [N, 1]
        helper.make_node("Cast", ["inside"], [ATTENTION_MASK], to=TensorProto.INT64),
        helper.make_node("Cast", ["counts"], [TOKEN_COUNT], to=TensorProto.INT32),
        helper.make_node("Identity", ["overs"], [TRUNCATED]),
    ]
    if with_token_types:  # single texts: every token is of the first segment
        nodes.append(helper.make_node("Sub", [ATTENTION_MASK, ATTENTION_MASK], [TOKEN_TYPE_IDS]))
    graph = helper.make_graph(
        nodes, "tokenizer",
        [helper.make_tensor_value_info(TEXT, TensorProto.STRING, ["batch", 1])],
        [*(helper.make_tensor_value_info(o, TensorProto.INT64, ["batch", "sequence"]) for o in outputs),
         helper.make_tensor_value_info(TOKEN_COUNT, TensorProto.INT32, ["batch", 1]),
         helper.make_tensor_value_info(TRUNCATED, TensorProto.BOOL, ["batch", 1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=8)


def session(model: onnx.ModelProto):
    """An onnxruntime session of a graph that uses the extensions' operators."""
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def first_difference(graph: onnx.ModelProto, encoder: TextEncoder, texts: list[str], names: tuple[str, ...]) -> str | None:
    """The first text whose in-graph tokens differ from the served tokenizer's, one at a time and as one batch
    (a batch must never become a pair); None where every tensor is equal."""
    run = session(graph)
    outputs = [o.name for o in graph.graph.output]
    for batch in [[t] for t in texts] + [texts]:
        got = dict(zip(outputs, run.run(None, {TEXT: np.array(batch, dtype=object).reshape(-1, 1)})))
        want = encoder.encode(batch)
        for name in names:
            if got[name].shape != want[name].shape or not np.array_equal(got[name], want[name]):
                rows = [k for k in range(len(batch)) if got[name].shape != want[name].shape
                        or not np.array_equal(got[name][k], want[name][k])]
                return f"{batch[rows[0] if rows else 0]!r} ({name})"
    return None


def compose_model(tokenizer: onnx.ModelProto, model: onnx.ModelProto, token_inputs: tuple[str, ...]) -> onnx.ModelProto:
    """The tokenizer graph, then the model's: raw strings in, the model's outputs and the row outputs out."""
    model_opset = {o.domain: o.version for o in model.opset_import}
    tokenizer = onnx.version_converter.convert_version(tokenizer, model_opset.get("", 17)) \
        if model_opset.get("", 17) != 17 else tokenizer
    tokenizer.ir_version = model.ir_version
    del tokenizer.opset_import[:]
    tokenizer.opset_import.extend([helper.make_opsetid("", model_opset.get("", 17)), helper.make_opsetid(DOMAIN, 1)])
    row_outputs = (TOKEN_COUNT, TRUNCATED)
    merged = compose.merge_models(
        tokenizer, model, io_map=[(n, n) for n in token_inputs],
        outputs=[o.name for o in model.graph.output] + list(row_outputs),
    )
    onnx.checker.check_model(merged, full_check=False)
    return merged


def op_library(target: Path) -> Path:
    """A copy of the extensions' operator library that loads where no Python runs.

    The wheel builds it as a Python extension: it leaves CPython's symbols to the interpreter that imports it,
    so tritonserver (no interpreter) cannot load it. The copy names the interpreter's shared libpython as a
    dependency (found on the serving machine's library path: Debian's libpython3.X), which resolves them; no
    interpreter starts, and the tokenizer's kernels call none of them.
    """
    from onnxruntime_extensions import get_library_path

    libpython = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if not libpython or not libpython.startswith("libpython"):
        raise Refused("the graph tokenizer's operators need a shared libpython, and this Python has none")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(get_library_path(), target)
    patchelf = shutil.which("patchelf")
    if patchelf is None:
        raise Refused("the graph tokenizer's operators need patchelf to load into tritonserver (apt install patchelf)")
    subprocess.run([patchelf, "--add-needed", libpython, str(target)], check=True, capture_output=True)
    return target
