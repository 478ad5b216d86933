"""A late-interaction (ColBERT) model's two forms of a text, tokenized as its library prepares them.

sentence-transformers' MultiVectorEncoder reads a text as a query or as a document (`encode_query`,
`encode_document`), and each form has its own preparation (Transformer.preprocess, then MultiVectorMask):

* the form's prompt before the text (a legacy marker such as `[unused0]` is a special token of the tokenizer
  the step loads, so it stays one token);
* truncation at the form's length;
* query expansion, where the model declares it: the row padded up to a floor with the expansion token
  (`[MASK]`), attended to only when the model says so (`attend`), and always scored;
* the scoring mask: the real tokens and the expansion positions, minus the skiplist's ids (punctuation,
  for the forms the skiplist applies to) and, for documents, only the ids a keep-only list names.

Each row becomes its ids, its attention mask and its scoring mask (`SCORE_MASK`), which the graph reads to
return the scored vectors alone. A request names each row's form in `FORM_INPUT`.

Served: copied verbatim next to the tokenizer step's (and the fused step's) model.py; it needs the standard
library and `tokenizers` only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tokenizers import Tokenizer

from .texts import InvalidText

PARAMETER = "forms"  # the tokenizer step's configuration parameter holding the forms as JSON
FORM_INPUT = "FORM"  # the ensemble's input naming each row's form
FORMS = ("query", "document")
EXPANSIONS = ("fixed", "min")  # QueryExpansionConfig's strategies: the floor is also the ceiling, or only the floor


@dataclass(frozen=True)
class Form:
    """How one form of a text is prepared, as the model's library prepares it."""

    name: str  # query | document
    max_length: int  # tokens a row is cut at, special tokens included
    prompt: str = ""  # prepended to the text
    expansion: str = ""  # "", or one of EXPANSIONS
    expansion_length: int = 0  # the width floor a row is expanded to
    expansion_id: int = 0  # the token the expansion positions hold
    attend: bool = False  # whether the encoder attends to the expansion positions
    expansion_scored: bool = True  # whether the expansion positions are scored (with a MultiVectorMask, always)
    skip_ids: tuple[int, ...] = ()  # ids never scored in this form
    keep_only_ids: tuple[int, ...] = ()  # where given: the only ids scored in this form

    def row(self, ids: Sequence[int], overflowing: bool) -> FormEncoding:
        """One encoded text -> its ids, attention and scoring masks, expanded where the form expands."""
        ids = list(ids)
        attention = [1] * len(ids)
        scored = [1] * len(ids)
        missing = self.expansion_length - len(ids) if self.expansion else 0
        if missing > 0:
            ids += [self.expansion_id] * missing
            attention += [int(self.attend)] * missing
            scored += [int(self.expansion_scored)] * missing
        skip, keep = set(self.skip_ids), set(self.keep_only_ids)
        scored = [int(s and i not in skip and (not keep or i in keep)) for s, i in zip(scored, ids)]
        return FormEncoding(ids, attention, scored, overflowing)


@dataclass
class FormEncoding:
    """One row as the tokenizer step hands it on (the fields of a `tokenizers` Encoding it reads, and the
    scoring mask)."""

    ids: list[int]
    attention_mask: list[int]
    score_mask: list[int]
    overflowing: bool

    @property
    def type_ids(self) -> list[int]:
        return [0] * len(self.ids)


def forms_to_json(forms: Sequence[Form]) -> str:
    return json.dumps([asdict(f) for f in forms], ensure_ascii=True)


def forms_from_json(text: str) -> tuple[Form, ...]:
    return tuple(Form(**{k: tuple(v) if isinstance(v, list) else v for k, v in f.items()}) for f in json.loads(text))


class FormTokenizer:
    """One tokenizer per form, each cutting at its form's length."""

    def __init__(self, tokenizer: Tokenizer, forms: Sequence[Form]):
        self.forms = {f.name: f for f in forms}
        self.tokenizers = {}
        for form in forms:
            own = Tokenizer.from_str(tokenizer.to_str())
            own.no_padding()
            own.enable_truncation(form.max_length, strategy="longest_first")
            self.tokenizers[form.name] = own

    def check(self, forms: Sequence[str], name: str = FORM_INPUT) -> None:
        """Refuse a row whose form is neither accepted one."""
        for index, form in enumerate(forms):
            if form not in self.forms:
                accepted = " or ".join(repr(f) for f in self.forms)
                raise InvalidText(f"{name}[{index}] is {form!r}: a row's form is {accepted}", "unknown_form")

    def encode(self, rows: Sequence[tuple[str, str]]) -> list[FormEncoding]:
        """(text, form) rows -> each one's encoding, in order; each form's rows in one batched encode."""
        out: list[FormEncoding | None] = [None] * len(rows)
        for name, form in self.forms.items():
            picked = [k for k, (_, f) in enumerate(rows) if f == name]
            if not picked:
                continue
            try:
                encodings = self.tokenizers[name].encode_batch([form.prompt + rows[k][0] for k in picked])
            except Exception as exc:  # noqa: BLE001 - the tokenizer's own words
                raise InvalidText(str(exc)) from None
            for k, e in zip(picked, encodings):
                out[k] = form.row(e.ids, bool(e.overflowing))
        return out  # type: ignore[return-value]
