"""Byte-level BPE in the graph (RoBERTa, GPT-2, ModernBERT, Qwen, CLIP; Gemma's byte-fallback BPE): the tokenizer.json
read by onnxruntime-extensions' `HfJsonTokenizer`, which normalizes, pre-tokenizes and merges as the family's
tokenizer does, a batch of texts in one call.

Added tokens are matched in the raw text first, as tokenizers matches them (longest first; whitespace beside a
token that strips it goes with it), so each part of a text between them is tokenized on its own, as tokenizers
does; the operator adds no special tokens (its configuration names none), and the frame (frame.py) puts the
tokenizer's own around each row. The gate (gate.py) holds the result to the served tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from ..errors import TokenizerRefused as Refused
from .nodes import DOMAIN, FLAT_IDS, N_ROWS, ROW_TOKENS, TEXTS, WHITESPACE, const, re2_literal, rows_in, text

SUPPORTED = "byte-level BPE tokenizers (ByteLevel pre-tokenizer or byte fallback)"
# The operator's tokenizer classes that read a tokenizer.json as BPE (onnxruntime-extensions' tokenizer_jsconfig.hpp);
# a folder's own class where it is one of them, else GPT-2's, the family's plain byte-level BPE.
OPERATOR_CLASSES = ("GPT2Tokenizer", "Qwen2Tokenizer", "CLIPTokenizer", "GemmaTokenizer", "PreTrainedTokenizer",
                    "LlamaTokenizer", "Phi3Tokenizer", "CodeGenTokenizer", "GPTNeoXTokenizer", "WhisperTokenizer",
                    "BaichuanTokenizer", "CodeLlamaTokenizer")
DEFAULT_CLASS = "GPT2Tokenizer"


@dataclass(frozen=True)
class ByteLevelBPE:
    """What the graph needs of a BPE tokenizer.json: its text, the operator's class, and its added tokens."""

    tokenizer_json: str
    operator_class: str
    added: tuple[tuple[str, bool, bool], ...]  # (content, lstrip, rstrip), longest first

    @classmethod
    def read(cls, tokenizer_file: Path, tokenizer_class: str | None) -> ByteLevelBPE:
        """The tokenizer's settings, refused in one line where the graph does not serve it."""
        raw = Path(tokenizer_file).read_text(encoding="utf-8")
        spec = json.loads(raw)
        model = spec.get("model") or {}
        if model.get("type") != "BPE":
            raise Refused(f"the graph tokenizer serves WordPiece and {SUPPORTED}; this tokenizer is "
                          f"{model.get('type')}" + (": onnxruntime-extensions 0.15.2 tokenizes one Unigram text a "
                                                    "call and sums its scores in float32, which splits some texts "
                                                    "otherwise than tokenizers" if model.get("type") == "Unigram" else ""))
        if model.get("dropout"):
            raise Refused("the graph tokenizer does not serve BPE dropout")
        added = [t for t in spec.get("added_tokens") or [] if t.get("content")]
        single = [t["content"] for t in added if t.get("single_word")]
        if single:
            raise Refused(f"the graph tokenizer does not match added tokens as single words ({single[0]!r})")
        chosen = tokenizer_class if tokenizer_class in OPERATOR_CLASSES else DEFAULT_CLASS
        return cls(raw, chosen, tuple(sorted(((t["content"], bool(t.get("lstrip")), bool(t.get("rstrip")))
                                              for t in added), key=lambda t: -len(t[0]))))

    @property
    def operator_config(self) -> str:
        """The operator's tokenizer_config: its class, and no special tokens of its own to add."""
        return json.dumps({"tokenizer_class": self.operator_class, "add_bos_token": False, "add_eos_token": False})


def _added_pattern(added: tuple[tuple[str, bool, bool], ...]) -> str:
    """Each added token, with the whitespace before (lstrip) or after (rstrip) it that it takes."""
    ws = f"[{WHITESPACE}]*"
    return "|".join(f"{ws if lstrip else ''}{re2_literal(t)}{ws if rstrip else ''}" for t, lstrip, rstrip in added)


def bpe_nodes(bpe: ByteLevelBPE) -> list[onnx.NodeProto]:
    """TEXT [N, 1] -> FLAT_IDS, ROW_TOKENS: every row's tokens, the added tokens written in it included.

    Each text is cut at its added tokens into parts (`segments`, with `row_splits` saying whose), the parts of the
    whole batch go to the operator at once (one empty part more, so that there is always one), and each part's
    tokens are read off its padded row by the operator's attention mask.
    """
    n = [*rows_in(), const("b_zero", [0]), const("b_zero_s", 0), const("b_one", [1]), const("b_minus_one", [-1]),
         const("b_axis1", [1]), const("b_end", [1 << 62]), text("b_empty", "")]
    if bpe.added:
        stripping = [t for t, lstrip, rstrip in bpe.added if lstrip or rstrip]
        n += [text("b_added", f"({_added_pattern(bpe.added)})", ()),
              helper.make_node("StringRegexSplitWithOffsets", [TEXTS, "b_added", "b_added"],
                               ["b_parts", "b_begins", "b_ends", "b_row_splits"], domain=DOMAIN)]
        segments = "b_parts"
        if stripping:  # a part that is one such token and the whitespace it took: the token alone
            group = "|".join(re2_literal(t) for t in stripping)
            n += [text("b_strip", f"^[{WHITESPACE}]*({group})[{WHITESPACE}]*$", ()), text("b_token", "\\1", ()),
                  helper.make_node("StringRegexReplace", ["b_parts", "b_strip", "b_token"], ["b_stripped"],
                                   domain=DOMAIN)]
            segments = "b_stripped"
        splits = "b_row_splits"
    else:  # each text is one part
        n += [helper.make_node("Add", [N_ROWS, "b_one"], ["b_n_1"]),
              helper.make_node("Squeeze", ["b_n_1"], ["b_n_1_s"]),
              const("b_one_s", 1),
              helper.make_node("Range", ["b_zero_s", "b_n_1_s", "b_one_s"], ["b_row_splits_all"])]
        segments, splits = TEXTS, "b_row_splits_all"
    n += [
        helper.make_node("Concat", [segments, "b_empty"], ["b_segments"], axis=0),
        helper.make_node("HfJsonTokenizer", ["b_segments"], ["b_ids", "b_mask"], domain=DOMAIN,
                         tokenizer_vocab=bpe.tokenizer_json, tokenizer_config=bpe.operator_config),
        helper.make_node("Cast", ["b_mask"], ["b_real"], to=TensorProto.BOOL),
        helper.make_node("Reshape", ["b_ids", "b_minus_one"], ["b_ids_flat"]),
        helper.make_node("Reshape", ["b_real", "b_minus_one"], ["b_real_flat"]),
        helper.make_node("Compress", ["b_ids_flat", "b_real_flat"], [FLAT_IDS], axis=0),
        # each row's tokens: the running count of the parts' tokens at its last part, less at its first
        helper.make_node("ReduceSum", ["b_mask", "b_axis1"], ["b_part_tokens"], keepdims=0),
        helper.make_node("CumSum", ["b_part_tokens", "b_zero_s"], ["b_running"]),
        helper.make_node("Concat", ["b_zero", "b_running"], ["b_before"], axis=0),
        helper.make_node("Slice", [splits, "b_one", "b_end"], ["b_row_last"]),
        helper.make_node("Slice", [splits, "b_zero", "b_minus_one"], ["b_row_first"]),
        helper.make_node("Gather", ["b_before", "b_row_last"], ["b_through"]),
        helper.make_node("Gather", ["b_before", "b_row_first"], ["b_until"]),
        helper.make_node("Sub", ["b_through", "b_until"], [ROW_TOKENS]),
    ]
    return n
