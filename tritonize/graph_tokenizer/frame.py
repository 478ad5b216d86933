"""Each row's tokens framed as the tokenizer frames them: its special tokens around the text, cut at the max length
as tokenizers cuts (the first max_length minus the special tokens, then the closing ones), padded to the bucket of
the batch's longest row as the Python tokenizer step pads."""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from ..errors import TokenizerRefused as Refused
from ..serving.batching import ATTENTION_MASK, INPUT_IDS, TOKEN_COUNT, TRUNCATED
from .nodes import FLAT_IDS, ROW_TOKENS, const

TOKEN_TYPE_IDS = "token_type_ids"
PROBE = "frame"  # a text every tokenizer spells without special tokens


@dataclass(frozen=True)
class Template:
    """The special tokens the tokenizer's post-processor puts around one text, and each token's segment id, asked
    of the tokenizer itself (whatever post-processor it has)."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    prefix_types: tuple[int, ...]
    suffix_types: tuple[int, ...]
    body_type: int

    @classmethod
    def of(cls, tokenizer) -> Template:
        """`tokenizer`: a `tokenizers.Tokenizer` (read without its own truncation or padding)."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_str(tokenizer.to_str())
        tokenizer.no_truncation()
        tokenizer.no_padding()
        plain = tokenizer.encode(PROBE, add_special_tokens=False).ids
        full = tokenizer.encode(PROBE)
        special = full.special_tokens_mask
        first = next((k for k, s in enumerate(special) if not s), len(special))
        last = max((k for k, s in enumerate(special) if not s), default=first - 1) + 1
        if full.ids[first:last] != plain or any(special[first:last]):
            raise Refused(f"the graph tokenizer frames a text with special tokens before and after it; this "
                          f"tokenizer makes {full.tokens} of {PROBE!r}")
        types = full.type_ids
        body = set(types[first:last])
        if len(body) > 1:
            raise Refused(f"the graph tokenizer gives a text's tokens one segment id; this tokenizer gives {types}")
        return cls(tuple(full.ids[:first]), tuple(full.ids[last:]), tuple(types[:first]), tuple(types[last:]),
                   body.pop() if body else 0)

    @property
    def specials(self) -> int:
        return len(self.prefix) + len(self.suffix)


def frame_nodes(template: Template, max_length: int, buckets: tuple[int, ...], pad_id: int,
                with_token_types: bool) -> list[onnx.NodeProto]:
    """FLAT_IDS [K], ROW_TOKENS [N] -> INPUT_IDS, ATTENTION_MASK (TOKEN_TYPE_IDS) [N, width] INT64, TOKEN_COUNT
    [N, 1] INT32, TRUNCATED [N, 1] BOOL.

    Column c of row r: a prefix token where c < len(prefix); then the row's tokens from where they begin in
    FLAT_IDS, up to its kept count; then the suffix; then the pad id (index K of the ids with one pad appended).
    """
    t, p, s = template, len(template.prefix), len(template.suffix)
    budget = max_length - t.specials
    if budget < 1:
        raise Refused(f"a max length of {max_length} leaves no room for text beside {t.specials} special tokens")
    n = [
        const("f_zero", 0), const("f_one", 1), const("f_axis", [-1]), const("f_budget", budget),
        const("f_specials", t.specials), const("f_p", p), const("f_buckets", list(buckets)),
        const("f_max", max_length), const("f_max_1", [max_length]), const("f_pad", [pad_id]),
        helper.make_node("Min", [ROW_TOKENS, "f_budget"], ["f_kept"]),
        helper.make_node("Greater", [ROW_TOKENS, "f_budget"], ["f_over"]),
        helper.make_node("Unsqueeze", ["f_over", "f_axis"], [TRUNCATED]),
        helper.make_node("Add", ["f_kept", "f_specials"], ["f_count"]),
        helper.make_node("Unsqueeze", ["f_count", "f_axis"], ["f_counts"]),
        helper.make_node("Cast", ["f_counts"], [TOKEN_COUNT], to=TensorProto.INT32),
        helper.make_node("CumSum", [ROW_TOKENS, "f_zero"], ["f_ends"]),
        helper.make_node("Sub", ["f_ends", ROW_TOKENS], ["f_starts"]),
        # the width: the smallest bucket that holds the longest row, at most the max length
        helper.make_node("ReduceMax", ["f_count"], ["f_longest"], keepdims=1),
        helper.make_node("GreaterOrEqual", ["f_buckets", "f_longest"], ["f_fits"]),
        helper.make_node("Where", ["f_fits", "f_buckets", "f_max"], ["f_candidates"]),
        helper.make_node("ReduceMin", ["f_candidates"], ["f_bucket"], keepdims=1),
        helper.make_node("Min", ["f_bucket", "f_max_1"], ["f_width"]),
        helper.make_node("Squeeze", ["f_width"], ["f_width_s"]),
        helper.make_node("Range", ["f_zero", "f_width_s", "f_one"], ["f_columns"]),
        helper.make_node("Sub", ["f_columns", "f_p"], ["f_rel"]),  # [W]: the column's place in the text
        helper.make_node("Unsqueeze", ["f_kept", "f_axis"], ["f_kept_1"]),
        helper.make_node("GreaterOrEqual", ["f_rel", "f_zero"], ["f_after_prefix"]),
        helper.make_node("Less", ["f_rel", "f_kept_1"], ["f_before_end"]),  # [N, W]
        helper.make_node("And", ["f_after_prefix", "f_before_end"], ["f_in_body"]),
        helper.make_node("Unsqueeze", ["f_starts", "f_axis"], ["f_starts_1"]),
        helper.make_node("Add", ["f_starts_1", "f_rel"], ["f_source"]),
        helper.make_node("Concat", [FLAT_IDS, "f_pad"], ["f_ids_or_pad"], axis=0),
        helper.make_node("Shape", [FLAT_IDS], ["f_k"]),
        helper.make_node("Squeeze", ["f_k"], ["f_pad_at"]),
        helper.make_node("Where", ["f_in_body", "f_source", "f_pad_at"], ["f_taken"]),
        helper.make_node("Gather", ["f_ids_or_pad", "f_taken"], ["f_body_ids"]),
        helper.make_node("Less", ["f_columns", "f_counts"], ["f_inside"]),
        helper.make_node("Cast", ["f_inside"], [ATTENTION_MASK], to=TensorProto.INT64),
        helper.make_node("Sub", ["f_rel", "f_kept_1"], ["f_srel"]),  # [N, W]: the column's place in the suffix
    ]
    ids, types = "f_body_ids", None
    if with_token_types:
        n += [const("f_body_type", t.body_type),
              helper.make_node("Where", ["f_inside", "f_body_type", "f_zero"], ["f_types_body"])]
        types = "f_types_body"
    for part, tokens, part_types, place in (("prefix", t.prefix, t.prefix_types, "f_columns"),
                                             ("suffix", t.suffix, t.suffix_types, "f_srel")):
        if not tokens:
            continue
        inside = [helper.make_node("Less", [place, f"f_{part}_len"], [f"f_{part}_before"]),
                  helper.make_node("GreaterOrEqual", [place, "f_zero"], [f"f_{part}_after"]),
                  helper.make_node("And", [f"f_{part}_before", f"f_{part}_after"], [f"f_at_{part}"]),
                  helper.make_node("Sub", [f"f_{part}_len", "f_one"], [f"f_{part}_last"]),
                  helper.make_node("Clip", [place, "f_zero", f"f_{part}_last"], [f"f_{part}_index"])]
        n += [const(f"f_{part}_len", len(tokens)), const(f"f_{part}_ids", list(tokens)), *inside,
              helper.make_node("Gather", [f"f_{part}_ids", f"f_{part}_index"], [f"f_{part}_tokens"]),
              helper.make_node("Where", [f"f_at_{part}", f"f_{part}_tokens", ids], [f"f_ids_{part}"])]
        ids = f"f_ids_{part}"
        if types:
            n += [const(f"f_{part}_types", list(part_types)),
                  helper.make_node("Gather", [f"f_{part}_types", f"f_{part}_index"], [f"f_{part}_type"]),
                  helper.make_node("Where", [f"f_at_{part}", f"f_{part}_type", types], [f"f_types_{part}"])]
            types = f"f_types_{part}"
    n.append(helper.make_node("Identity", [ids], [INPUT_IDS]))
    if types:
        n.append(helper.make_node("Identity", [types], [TOKEN_TYPE_IDS]))
    return n
