"""The gate a tokenizer graph passes before it is served: its tokens, for every text checked, equal the served
tokenizer's (serving/tokenizer.py), one text at a time and all as one batch; run with the operator library that
is served (runtime/operator_library.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from ..errors import TokenizerRefused as Refused
from ..errors import TritonizeError
from ..paths import DATA_DIR
from ..serving.tokenizer import TextEncoder
from .nodes import TEXT

CORPUS = DATA_DIR / "corpus_mixed.txt"

# Texts where the operators and Hugging Face's tokenizer are known to part (onnxruntime-extensions issues 623,
# 852, 984): accents in cased and uncased vocabularies, CJK, emoji, control and zero-width characters, runs of
# whitespace, special tokens written in the text, and texts past any max length.
ADVERSARIAL_TEXTS: tuple[str, ...] = (
    "Café déjà vu, naïve résumé, Ångström, Øresund, São Paulo",
    "CAFÉ DÉJÀ VU ÑANDÚ ÉCOLE Ελληνικά Ἀθῆναι",
    "Ǆemal ﬁnished the ﬂight; ½ cup, ² squared, Ⅻ o'clock",
    "words the vocabulary cannot spell: na😀ve x☃y Ⅻth qu€€n",
    "東京は日本の首都です。北京欢迎你！한국어 문장입니다.",
    "emoji 😀👍🏽 👨‍👩‍👧 flags 🇫🇷 and ❤️ hearts",
    "control\x01chars\x07and\x1bescapes\x7f\x85 here\ufffd",
    "zero\u200bwidth\u200cjoin\u200dand\ufeffbom and soft\u00adhyphen",
    "tabs\tand\nnewlines\r\nand   runs     of\u00a0\u2003spaces   ",
    "   ",
    "",
    " leading space", "trailing space ", "double  space", "\u00a0no-break\u00a0", "x\u3000ideographic space",
    "[CLS] written [SEP] in the [MASK] text [PAD] [UNK]",
    "[cls] lower [sep] and [Mask]",
    "glued[CLS]special[SEP]tokens[SEP]",
    "the graph's own marks \x01 \x02 0 \x03, wo\x02rds and \x020 private\ue000use\U000f0000 here\x01",
    "punctuation!!! ...?? (brackets) {braces} <tags> \"quotes\" 'apostrophes' — dashes – ‐",
    "contractions: it's, I'm, you're, they've, we'll, he'd, DON'T, 'quoted'",
    "numbers 3.14159 1,000,000 2024-01-01 +44(0)20 7946 0958 100 1000 10000",
    "url https://example.com/a?b=c&d=e#f and mail someone@example.org",
    "code: def f(x):\n    return x ** 2  # squared\n\t}",
    "a" * 300,
    ("x" * 200 + " ") * 60 + "long words the vocabulary cannot split: a few tokens a 200-character word",
    "short words " * 2000 + "read from an exact prefix",
    "supercalifragilisticexpialidocious " * 5,
    " ".join(["word"] * 600),
    "Accentuée " * 400,
    "日本語" * 400,
)


def family_texts(tokenizer_file: str | Path) -> list[str]:
    """Texts with the tokenizer's own added tokens written in them: as written, glued to words, beside spaces,
    and lowercased."""
    added = [t["content"] for t in json.loads(Path(tokenizer_file).read_text(encoding="utf-8")).get("added_tokens")
             or [] if t.get("content")][:40]
    if not added:
        return []
    pairs = list(zip(added, added[1:] + added[:1]))
    return [
        " ".join(f"{a} written {b}" for a, b in pairs),
        "".join(f"glued{a}to{b}words" for a, b in pairs),
        "  ".join(f" {a}  spaced  {b} " for a, b in pairs),
        " ".join(f"{a.lower()} lower {b.upper()}" for a, b in pairs),
        f"{added[0]}",
        f"{added[0]}{added[0]}",
    ]


def session(model: onnx.ModelProto):
    """An onnxruntime session of a graph that uses the extensions' operators, from the served library."""
    import onnxruntime as ort

    from ..runtime import operator_library

    try:
        library = operator_library.find()
    except TritonizeError as exc:
        raise Refused(f"{exc.message} ({exc.hint})") from None
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def checked_texts(texts: list[str], tokenizer_file: str | Path) -> list[str]:
    """Everything the gate checks: verification's texts, the shipped corpus, the adversarial texts and the
    tokenizer's own added tokens written in texts."""
    return [*texts, *CORPUS.read_text(encoding="utf-8").splitlines(), *ADVERSARIAL_TEXTS,
            *family_texts(tokenizer_file)]


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
