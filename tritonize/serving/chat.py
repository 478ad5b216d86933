"""A (query, document) pair rendered through a model's chat template, as fixed text around the two.

A causal-LM reranker (Qwen3-Reranker in sentence-transformers' layout) reads each pair as its chat template
renders it: a system prompt and an instruction, the query, the document, the assistant's turn. Jinja does
not run in the served step: generation renders the template once with a marker in place of each text, keeps
the fixed parts between the markers (prefix, middle, suffix), and checks that those parts reproduce the
library's own rendering of real pairs. The step then joins the parts around each pair, tokenizes the whole
string without special tokens (as `apply_chat_template` tokenizes), and cuts it where the library cuts it.

Truncation, as sentence-transformers does it: the rendered tokens are cut at the max length from the end, and
a row that reaches the max length then ends in the template's own closing tokens again (`suffix_ids`, written
over its last tokens), so the model still reads the assistant's turn where it scores.

Served: copied verbatim next to the tokenizer step's model.py; standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

PARAMETER = "pair_template"  # the tokenizer step's configuration parameter that holds a PairTemplate as JSON


@dataclass(frozen=True)
class PairTemplate:
    prefix: str  # everything before the query
    middle: str  # between the query and the document
    suffix: str  # after the document
    suffix_ids: tuple[int, ...] = ()  # the template's closing tokens, restored at the end of a truncated row

    def render(self, query: str, document: str) -> str:
        return self.prefix + query + self.middle + document + self.suffix

    def restore(self, ids: Sequence[int], max_length: int) -> list[int]:
        """A row's ids, ending in the template's closing tokens again where it reached the max length."""
        ids = list(ids)
        keep = min(len(self.suffix_ids), len(ids))
        if len(ids) < max_length or not keep:
            return ids
        return ids[: len(ids) - keep] + list(self.suffix_ids[len(self.suffix_ids) - keep :])

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str) -> PairTemplate:
        data = json.loads(text)
        return cls(data["prefix"], data["middle"], data["suffix"], tuple(int(i) for i in data.get("suffix_ids", ())))
