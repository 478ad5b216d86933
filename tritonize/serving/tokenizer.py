"""The tokenizer step: raw UTF-8 strings in, token tensors padded to a bucket length out.

Served: Triton runs a byte-identical copy of this file as the step's
model.py, with batching.py beside it. It needs only `tokenizers` and numpy,
never transformers. Tensor names, the tokenizer file, the max length, the
buckets, the pad id, the truncation strategy and the request bound are read
from the model configuration Triton hands over. A step with two text inputs
encodes pairs (query and document) with the model's own pair template. One
batched encode covers every request of an execute() call; each request is
padded to the smallest bucket that fits its longest text, so requests of one
bucket have equal shapes and the next step can batch them. A causal-LM
reranker's pairs are rendered through its chat template instead
(serving/chat.py). A late-interaction model's rows are a text and its form
(query or document), each prepared as its form declares (serving/multi_vector.py).

A text longer than the max length is truncated by the tokenizer, as the
reference libraries truncate it. Tokenizing costs time in proportion to the
whole text (0.35 to 1 s per MB on one core), so a text much longer than the
model reads is tokenized from a prefix where that is provably exact
(`exact_prefixes`).

A request may ask for its texts to be cut otherwise, by request parameters (Triton forwards an ensemble
request's parameters to every step): `truncation_direction: left` keeps a long text's last tokens, as the
tokenizer's own `direction="left"` cuts it; `windows` (a window index per row) with `window_overlap` makes each
row one max-length window of its text, the windows the tokenizer's `stride` makes (transformers'
`return_overflowing_tokens`). A request without them is served as before (`Cut`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from .admission import QueueView
from .batching import (
    ATTENTION_MASK,
    ENCODING_FIELDS,
    INPUT_IDS,
    OFFSETS,
    ROW_FIELDS,
    SCORE_MASK,
    TOKEN_COUNT,
    TRUNCATION_DIRECTION,
    WINDOW_OVERLAP,
    WINDOWS,
    bucket_for,
    pad_rows,
    pad_value,
    parse_buckets,
)
from .chat import PARAMETER as PAIR_TEMPLATE
from .chat import PairTemplate
from .metrics import METRICS_MODEL, StepMetrics
from .multi_vector import PARAMETER as FORMS
from .multi_vector import Form, FormTokenizer, forms_from_json
from .prefixes import PREFIX_CHARS_PER_TOKEN, exact_prefixes, prefix_end
from .statistics import OutputStatistics
from .texts import InvalidText, check_size, decode, unk_token_id
from .stub import ServedStep

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests, verification and the benchmark use TextEncoder
    pb_utils = None


# -- how a request asks for its texts to be cut (batching.py names the parameters) -------------------------------
DIRECTION, OVERLAP = TRUNCATION_DIRECTION, WINDOW_OVERLAP


@dataclass(frozen=True)
class Cut:
    """How one request's texts are cut to the max length: at the end (the default), at the start, or into
    overlapping windows, one a row."""

    left: bool = False
    overlap: int = 0
    windows: tuple[int, ...] | None = None

    @classmethod
    def of(cls, params: Mapping[str, Any], rows: int) -> Cut:
        """A request's parameters (its own JSON, as the Python backend hands them over) -> its cut; a value the
        step cannot serve is refused in one line."""
        direction = str(params.get(DIRECTION, "right")).lower()
        if direction not in ("left", "right"):
            raise InvalidText(f"{DIRECTION} must be left or right, got {params[DIRECTION]!r}", "parameters")
        windows = None
        if WINDOWS in params:
            try:
                windows = tuple(int(k) for k in str(params[WINDOWS]).split(","))
                overlap = int(params.get(OVERLAP, 0))
            except ValueError:
                raise InvalidText(f"{WINDOWS} must be comma-separated window indices and {OVERLAP} an integer",
                                  "parameters") from None
            if len(windows) != rows or min(windows) < 0 or overlap < 0:
                raise InvalidText(f"{WINDOWS} must hold one window index (0 or more) per row ({rows}), and "
                                  f"{OVERLAP} must be 0 or more", "parameters")
            if direction == "left":
                raise InvalidText(f"{WINDOWS} cut a text from its start: {DIRECTION} left does not apply",
                                  "parameters")
            return cls(False, overlap, windows)
        return cls(direction == "left")

    @property
    def plain(self) -> bool:
        return self == PLAIN


PLAIN = Cut()


def request_parameters(request) -> dict[str, Any]:
    """A Triton request's parameters (a JSON object; empty where the backend has none)."""
    read = getattr(request, "parameters", None)
    return json.loads(read() or "{}") if read is not None else {}


def parameters(model_config: dict) -> dict[str, str]:
    """The string parameters of a model configuration, as Triton hands it to a Python model."""
    return {k: v["string_value"] for k, v in model_config.get("parameters", {}).items()}


class TextEncoder:
    """tokenizer.json with the model's max length, and bucketed padding."""

    def __init__(self, tokenizer_file: str, max_length: int, buckets: list[int], pad_id: int, outputs: tuple[str, ...],
                 truncation: str = "longest_first", max_request_bytes: int = 0, truncate: bool = True,
                 names: tuple[str, ...] = ("TEXT",), template: PairTemplate | None = None,
                 forms: tuple[Form, ...] = ()):
        producible = {*ENCODING_FIELDS, *ROW_FIELDS, *((SCORE_MASK,) if forms else ())}
        unknown = [name for name in outputs if name not in producible]
        if unknown:
            raise ValueError(f"cannot produce {unknown}: a tokenizer gives {sorted(producible)}")
        self.tokenizer = Tokenizer.from_file(tokenizer_file)
        # tokenizer.json files often carry their own truncation/padding (e.g. fixed padding to 128): override both.
        # Pairs cut with "only_second" lose words of the document, never of the query.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length, strategy=truncation)
        self.max_length = max_length
        self.buckets = parse_buckets(",".join(map(str, buckets)), max_length)
        self.pad_id = pad_id
        self.outputs = tuple(outputs)
        self.max_request_bytes, self.truncate, self.names = max_request_bytes, truncate, tuple(names)
        self.unk_id = unk_token_id(self.tokenizer)
        # Single texts, and the document of a pair cut "only_second", may be read from an exact prefix.
        exact = exact_prefixes(json.loads(self.tokenizer.to_str()))
        self.prefix_chars = PREFIX_CHARS_PER_TOKEN * max_length if exact else 0
        self.cut_second = truncation == "only_second"
        self.truncation = truncation
        self._cutters: dict[tuple[bool, int], Tokenizer] = {}  # the tokenizer cutting otherwise, by (left, overlap)
        self.template = template  # pairs rendered as one text, without special tokens (apply_chat_template's way)
        # Rows of (text, form), each prepared as its form declares (a late-interaction model's query or document).
        self.forms = FormTokenizer(self.tokenizer, forms) if forms else None
        # tokenizers' batched encode without character offsets where no output reads them: the same tokens, and
        # 13-24% less of the tokenizer's time per text (16 to 128 tokens; docs/benchmark.md, the host CPU).
        self.encode_batch = self.tokenizer.encode_batch if OFFSETS in self.outputs else self.tokenizer.encode_batch_fast

    @classmethod
    def from_config(cls, model_config: dict, version_dir: str, outputs: tuple[str, ...] | None = None) -> TextEncoder:
        """Everything from the step's configuration: files are found through the version directory. `outputs`:
        the tensors to produce, where the step declares more than the tokenizer's (serving/fused_step.py)."""
        p = parameters(model_config)
        return cls(
            os.path.join(version_dir, p["tokenizer_file"]),
            int(p["max_length"]),
            parse_buckets(p["buckets"]),
            int(p["pad_id"]),
            outputs or tuple(o["name"] for o in model_config["output"]),
            p.get("truncation", "longest_first"),
            int(p.get("max_request_bytes", "0")),
            p.get("truncate", "1") == "1",
            tuple(i["name"] for i in model_config["input"]),
            template=PairTemplate.from_json(p[PAIR_TEMPLATE]) if PAIR_TEMPLATE in p else None,
            forms=forms_from_json(p[FORMS]) if FORMS in p else (),
        )

    def bucket(self, length: int) -> int:
        return bucket_for(length, self.buckets)

    def decode(self, raw: np.ndarray, name: str) -> list[str]:
        """BYTES elements -> str (serving/texts.py)."""
        return decode(raw, name)

    def _prefix(self, item):
        """The text (or pair) to encode first: an exact prefix of a long text, or the item itself."""
        if not self.prefix_chars:
            return item
        if isinstance(item, str):
            end = prefix_end(item, self.prefix_chars)
            return item if end is None else item[:end]
        if len(item) == 2 and self.cut_second:
            end = prefix_end(item[1], self.prefix_chars)
            return item if end is None else (item[0], item[1][:end])
        return item

    def _encode(self, items: list) -> list:
        """tokenizers' batched encode; a prefix that was not truncated is encoded again whole."""
        if self.forms is not None:
            return self.forms.encode(items)
        special = self.template is None
        try:
            if not special:
                items = [self.template.render(*t) for t in items]
            firsts = [self._prefix(t) for t in items]
            encodings = self.encode_batch(firsts, add_special_tokens=special)
            again = [k for k, (item, first) in enumerate(zip(items, firsts)) if first is not item
                     and not encodings[k].overflowing]
            if again:
                for k, e in zip(again, self.encode_batch([items[k] for k in again], add_special_tokens=special)):
                    encodings[k] = e
        except Exception as exc:  # noqa: BLE001 - the tokenizer's own words (e.g. a query too long to keep)
            raise InvalidText(str(exc)) from None
        return encodings

    def _cutter(self, cut: Cut) -> Tokenizer:
        """The served tokenizer, truncating at the start or with a stride: a copy, so the default stays as built."""
        key = (cut.left, cut.overlap)
        if key not in self._cutters:
            if self.forms is not None or self.template is not None or len(self.names) > 1:
                raise InvalidText(f"{DIRECTION} and {WINDOWS} apply to single texts; this step reads "
                                  f"{', '.join(self.names)}" + (" prepared by a template" if self.template else ""),
                                  "parameters")
            specials = self.tokenizer.num_special_tokens_to_add(False)
            if cut.overlap and cut.overlap >= self.max_length - specials:
                raise InvalidText(f"{OVERLAP} {cut.overlap} must be under the {self.max_length - specials} tokens "
                                  "of text a window holds", "parameters")
            tokenizer = Tokenizer.from_str(self.tokenizer.to_str())
            tokenizer.enable_truncation(self.max_length, stride=cut.overlap, strategy=self.truncation,
                                        direction="left" if cut.left else "right")
            self._cutters[key] = tokenizer
        return self._cutters[key]

    def _encode_cut(self, items: list, cut: Cut) -> tuple[list, list[bool]]:
        """Texts cut as `cut` asks (each text whole: no prefix is exact for its end or its later windows), and
        whether each row lost tokens (a window is a whole row of its own)."""
        tokenizer = self._cutter(cut)
        encode = tokenizer.encode_batch if OFFSETS in self.outputs else tokenizer.encode_batch_fast
        try:
            if cut.windows is None:
                encodings = encode(items)
                return encodings, [bool(e.overflowing) for e in encodings]
            unique = list(dict.fromkeys(items))  # a text's windows come from one encoding
            whole = dict(zip(unique, encode(unique)))
        except Exception as exc:  # noqa: BLE001 - the tokenizer's own words
            raise InvalidText(str(exc)) from None
        rows = []
        for index, (text, k) in enumerate(zip(items, cut.windows)):
            windows = [whole[text], *whole[text].overflowing]
            if k >= len(windows):
                raise InvalidText(f"{self.names[0]}[{index}] has {len(windows)} windows of {self.max_length} tokens "
                                  f"(overlap {cut.overlap}); window {k} does not exist", "parameters")
            rows.append(windows[k])
        return rows, [False] * len(rows)

    def _encode_all(self, groups: list[list], cuts: list[Cut]) -> tuple[list, list[bool]]:
        """Every request's rows, each request cut as it asks: one batched encode per kind of cut."""
        items = [t for g in groups for t in g]
        if all(c.plain for c in cuts):
            encodings = self._encode(items)
            return encodings, [bool(e.overflowing) for e in encodings]
        owner = [c for g, c in zip(groups, cuts) for _ in g]
        encodings, cut = [None] * len(items), [False] * len(items)
        for kind in dict.fromkeys(cuts):
            at = [k for k, c in enumerate(owner) if c == kind]
            if kind.plain:
                done = self._encode([items[k] for k in at])
                flags = [bool(e.overflowing) for e in done]
            elif kind.windows is None:
                done, flags = self._encode_cut([items[k] for k in at], kind)
            else:  # each request's windows belong to its own rows
                done, flags = [], []
                for g, c in zip(groups, cuts):
                    if c == kind:
                        rows, row_flags = self._encode_cut(g, c)
                        done += rows
                        flags += row_flags
            for k, e, f in zip(at, done, flags):
                encodings[k], cut[k] = e, f
        return encodings, cut

    def _too_long(self, index: int, item) -> InvalidText:
        limit, names = self.max_length, self.names[-1:]
        if self.forms is not None:  # a (text, form) row: the text, at its form's length
            limit, names = self.forms.forms[item[1]].max_length, self.names[:1]
        elif len(self.names) > 1 and not isinstance(item, str):
            names = self.names
        what = " and ".join(f"{n}[{index}]" for n in names)
        verb = "are" if len(names) > 1 else "is"
        return InvalidText(
            f"{what} {verb} longer than this model's max length of {limit} tokens, and this repository "
            "refuses over-long texts instead of truncating them: send shorter texts (or generate with --truncate)",
            "too_long",
        )

    def encode(self, texts: list, width: int | None = None) -> dict[str, np.ndarray]:
        """One request's texts (or (first, second) pairs) -> its token tensors, padded to one bucket (or to `width`)."""
        return self.encode_many([texts], width)[0]

    def encode_many(self, groups: list[list], width: int | None = None,
                    counts: dict | None = None, cuts: list[Cut] | None = None) -> list[dict[str, np.ndarray]]:
        """Several requests' texts (or pairs) in one batched encode, each request padded to its bucket.

        width=0 pads each request to its own longest text instead of a bucket. With `counts`, adds what the
        step's metrics count: texts, tokens, padded tokens, truncated texts, unknown tokens. `cuts`: how each
        request asks its texts cut (none: at the end).
        """
        encodings, cut = self._encode_all(groups, cuts or [PLAIN] * len(groups))
        if not self.truncate:  # before anything is counted: a refused request counts as refused only
            start = 0
            for g in groups:
                over = next((j for j, c in enumerate(cut[start : start + len(g)]) if c), None)
                if over is not None:
                    raise self._too_long(over, g[over])
                start += len(g)
        results, start = [], 0
        for g in groups:
            rows, flags = encodings[start : start + len(g)], cut[start : start + len(g)]
            start += len(g)
            longest = max(len(e.ids) for e in rows)
            w = width if width else (longest if width == 0 else self.bucket(longest))
            tensors = {
                name: pad_rows([self._field(e, name) for e in rows], w, pad_value(name, self.pad_id))
                if name not in ROW_FIELDS else row_field(name, rows, flags)
                for name in self.outputs
            }
            results.append(tensors)
            if counts is not None:
                self._count(counts, flags, tensors)
        return results

    def _field(self, encoding, name: str) -> list:
        """One row's tensor: a templated row that reached the max length ends in the template's closing tokens."""
        if name == INPUT_IDS and self.template is not None:
            return self.template.restore(encoding.ids, self.max_length)
        if name == SCORE_MASK:
            return encoding.score_mask
        return getattr(encoding, ENCODING_FIELDS[name])

    def _count(self, counts: dict, cut: list[bool], tensors: dict[str, np.ndarray]) -> None:
        """What the step's metrics count for one request, mostly from the padded arrays (cheap)."""
        mask = tensors[ATTENTION_MASK]
        unknown = int(((tensors[INPUT_IDS] == self.unk_id) & (mask == 1)).sum()) if self.unk_id is not None else 0
        for key, value in (("texts", len(cut)), ("tokens", int(mask.sum())), ("padded", int(mask.size)),
                           ("truncated", sum(cut)), ("unknown", unknown)):
            counts[key] = counts.get(key, 0) + value

    def rows(self, inputs: dict[str, np.ndarray], names: list[str]) -> list:
        """One request's inputs -> texts, or (first, second) pairs when the step has two inputs; a request over
        the byte bound is refused before anything is decoded."""
        check_size((inputs[name] for name in names), self.max_request_bytes)
        columns = [self.decode(inputs[name], name) for name in names]
        if self.forms is not None and len(columns) == 2:
            self.forms.check(columns[1], names[1])
        if len(columns) == 1:
            return columns[0]
        if len({len(c) for c in columns}) != 1:
            raise InvalidText(f"{' and '.join(names)} must hold the same number of rows, got {[len(c) for c in columns]}",
                              "rows_mismatch")
        return list(zip(*columns))


def row_field(name: str, rows: list, cut: list[bool]) -> np.ndarray:
    """One value per row: the tokens the model reads (INT32), or whether the text lost tokens (BOOL)."""
    if name == TOKEN_COUNT:
        return np.array([[len(e.ids)] for e in rows], dtype=np.int32)
    return np.array([[c] for c in cut], dtype=bool)


def error_response(message: str, code: str = "INVALID_ARG"):
    """A request's answer that is an error: INVALID_ARG for its input unless `code` names another TritonError code."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, getattr(pb_utils.TritonError, code)))


class RequestEncoder:
    """A batch of Triton requests -> each one's token tensors, or its refusal; counts what it tokenized and
    refused on Triton's metrics port (serving/metrics.py). The tokenizer step, and the fused step."""

    def __init__(self, model_config: dict, version_dir: str, outputs: tuple[str, ...] | None = None):
        self.encoder = TextEncoder.from_config(model_config, version_dir, outputs)
        self.input_names = [i["name"] for i in model_config["input"]]
        self.metrics = StepMetrics(parameters(model_config).get(METRICS_MODEL) or model_config["name"])
        # What the repository counts of its answers (serving/statistics.py): here, the tokens of each text.
        self.statistics = OutputStatistics.of_step(version_dir, self.metrics)
        if self.statistics is not None:
            self.statistics.start({TOKEN_COUNT})

    def _refuse(self, exc: InvalidText):
        self.metrics.rejected(exc.reason)
        return error_response(str(exc))

    def encode(self, requests) -> tuple[list, list[int], list[dict[str, np.ndarray]]]:
        """(a response per request: its error, or None where it was encoded; the encoded requests' indices;
        their tensors)."""
        responses = [None] * len(requests)
        valid, groups, cuts, counts = [], [], [], {}
        for i, request in enumerate(requests):
            inputs = {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.input_names}
            try:
                rows = self.encoder.rows(inputs, self.input_names)
                cuts.append(Cut.of(request_parameters(request), len(rows)))
                groups.append(rows)
                valid.append(i)
            except InvalidText as exc:
                responses[i] = self._refuse(exc)
        try:
            encoded = self.encoder.encode_many(groups, counts=counts, cuts=cuts) if groups else []
        except InvalidText:
            # One request the tokenizer cannot encode: find it, and answer the others.
            encoded = []
            for i, group, cut in list(zip(valid, groups, cuts)):
                try:
                    encoded.append(self.encoder.encode_many([group], counts=counts, cuts=[cut])[0])
                except InvalidText as exc:
                    responses[i] = self._refuse(exc)
                    valid.remove(i)
        self.metrics.record(counts)
        if self.statistics is not None and encoded:
            self.statistics.observe({TOKEN_COUNT: np.concatenate([t[ATTENTION_MASK].sum(axis=1) for t in encoded])})
        return responses, valid, encoded


class TritonPythonModel(ServedStep):
    """Reads its input names and outputs from the configuration; one error per bad request. Where the model step
    after it bounds its queue, refuses before tokenizing what that queue would refuse (serving/admission.py)."""

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        self.front = RequestEncoder(config, version_dir)
        self.admission = QueueView.of_step(parameters(config))

    def execute(self, requests):
        refused = []
        if self.admission is not None:
            admitted = self.admission.admit(len(requests))
            if admitted < len(requests):
                requests, refused = requests[:admitted], requests[admitted:]
                self.front.metrics.record({"queue_full": len(refused)})
        responses, valid, encoded = self.front.encode(requests)
        for i, tensors in zip(valid, encoded):
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, arr) for name, arr in tensors.items()]
            )
        if refused:
            message = self.admission.message()
            responses += [error_response(message, "UNAVAILABLE") for _ in refused]
        return responses

    def finalize(self):
        if self.admission is not None:
            self.admission.close()
        self.front.metrics.close()
