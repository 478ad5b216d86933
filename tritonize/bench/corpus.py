"""Benchmark workloads: rows of an exact token count, the shipped mixed-length corpus, and images.

A row is what one request sends: a text, or for a pair task the task's
sample first text (a query, a question) and a corpus text. Token counts are
those the served steps compute for the whole row (special tokens included;
every window of a question-answering context), so a "16-token" row fills the
16 bucket exactly and every system computes the same number of tokens for it.
An `images` row is one encoded JPEG file, for a model whose ensemble takes images
(its contract's `image_input`); each row's pixels differ, so nothing a step might
keep from one request serves the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TritonizeError
from ..paths import DATA_DIR

MIXED_CORPUS = DATA_DIR / "corpus_mixed.txt"
TEXT_WORKLOADS = ("short", "long", "mixed")
IMAGES = "images"  # encoded JPEG files, one a request, for a model that embeds images
WORKLOADS = (*TEXT_WORKLOADS, IMAGES)
DEFAULT_SHORT_TOKENS = 16
DEFAULT_LONG_TOKENS = 128
DEFAULT_TEXTS = 256
IMAGE_SIDE = 224  # the images' width and height: what a ViT-B/32 CLIP reads, so its processor resizes nothing
JPEG_QUALITY = 90

CountTokens = Callable[[str], int]
Row = tuple[str, ...]


@dataclass(frozen=True)
class Workload:
    """A named list of request rows, sent in this order (the arrival order)."""

    name: str
    rows: list[Row]
    tokens: list[int] = field(repr=False)  # per row, after truncation to the model's max length
    description: str = ""
    # The model rows the request rows become, in order (a question-answering context: one per window).
    model_rows: list[int] = field(default_factory=list, repr=False)
    # The same, per request row: the tokens of each model row it becomes.
    row_lengths: list[list[int]] = field(default_factory=list, repr=False)
    images: bool = False  # each row is one encoded image file (bytes), not texts

    def summary(self) -> dict:
        if self.images:
            sizes = np.asarray([len(row[0]) for row in self.rows])
            return {"rows": len(self.rows), "example": [f"<{sizes[0]} bytes of JPEG>"], "description": self.description,
                    "bytes": {"min": int(sizes.min()), "p50": float(np.percentile(sizes, 50)), "max": int(sizes.max())}}
        t = np.asarray(self.tokens)
        return {
            "rows": len(self.rows),
            "example": list(self.rows[0]),
            "description": self.description,
            "tokens": {
                "min": int(t.min()),
                "p50": float(np.percentile(t, 50)),
                "mean": round(float(t.mean()), 1),
                "p90": float(np.percentile(t, 90)),
                "max": int(t.max()),
            },
            "non_ascii_rows": sum(any(ord(c) > 127 for c in "".join(r)) for r in self.rows),
        }


def read_corpus(path: Path | None = None) -> list[str]:
    """One text per non-blank line (UTF-8)."""
    path = Path(path) if path else MIXED_CORPUS
    if not path.is_file():
        raise TritonizeError(f"corpus file {path} does not exist")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    texts = [line for line in lines if line]
    if not texts:
        raise TritonizeError(f"corpus file {path} holds no text")
    return texts


def exact_length_texts(words: list[str], target: int, n: int, count: CountTokens) -> list[str]:
    """n distinct texts of exactly `target` tokens, made of consecutive corpus words.

    Word piece counts add up across whitespace, so words are taken greedily
    and the remainder is filled with the next words that still fit; every text
    is checked with a full encode. A word after a space is counted after a
    space: byte-level BPE (RoBERTa's, Qwen's) encodes " word" and a text's
    first "word" differently.
    """
    empty = count("")
    if target <= empty:
        raise TritonizeError(f"cannot build {target}-token texts: the tokenizer adds {empty} special tokens")
    cost: dict[tuple[str, bool], int] = {}

    def word_cost(w: str, first: bool) -> int:
        if (w, first) not in cost:
            cost[w, first] = count(w) - empty if first else count(f"{w} {w}") - count(w)
        return cost[w, first]

    texts: list[str] = []
    seen: set[str] = set()
    start, attempts = 0, 0
    while len(texts) < n and attempts < 20 * n:
        attempts += 1
        chosen, used, i = [], empty, start
        for _ in range(4 * target + 200):
            w = words[i % len(words)]
            i += 1
            c = word_cost(w, not chosen)
            if 0 < c <= target - used:
                chosen.append(w)
                used += c
                if used == target:
                    break
        start += 7  # next text starts elsewhere, so texts differ
        text = " ".join(chosen)
        if used == target and text not in seen and count(text) == target:
            seen.add(text)
            texts.append(text)
    if len(texts) < n:
        raise TritonizeError(
            f"could only build {len(texts)} of {n} distinct texts of {target} tokens from the corpus "
            f"(a row takes {empty} tokens before its text)",
            hint="pass a larger --short-tokens or --long-tokens",
        )
    return texts


def build_workloads(
    names: list[str],
    row_lengths: Callable[[Row], list[int]],
    max_length: int,
    corpus: list[str],
    short_tokens: int = DEFAULT_SHORT_TOKENS,
    long_tokens: int = DEFAULT_LONG_TOKENS,
    n_texts: int = DEFAULT_TEXTS,
    row: Callable[[str], Row] = lambda text: (text,),
) -> dict[str, Workload]:
    """The requested workloads, one row around each text; fixed lengths are capped at the model's max length."""
    unknown = [n for n in names if n not in TEXT_WORKLOADS]
    if unknown:
        raise TritonizeError(f"unknown workload(s): {', '.join(unknown)}", hint=f"choose from {', '.join(TEXT_WORKLOADS)}")
    words = [w for line in corpus for w in line.split()]
    count: CountTokens = lambda text: sum(row_lengths(row(text)))  # noqa: E731
    unit = "pairs" if len(row("")) > 1 else "texts"
    result: dict[str, Workload] = {}
    for name in names:
        if name == "mixed":
            rows = [row(t) for t in corpus]
            description = f"shipped corpus, {len(rows)} {unit} of mixed length"
        else:
            target = min(short_tokens if name == "short" else long_tokens, max_length)
            rows = [row(t) for t in exact_length_texts(words, target, n_texts, count)]
            description = f"{len(rows)} {unit} of exactly {target} tokens"
        lengths = [row_lengths(r) for r in rows]
        result[name] = Workload(name, rows, [sum(n) for n in lengths], description, [n for ns in lengths for n in ns],
                                lengths)
    return result


def jpeg_images(n: int, side: int = IMAGE_SIDE, seed: int = 0) -> list[bytes]:
    """n different JPEG files of side x side pixels: smooth colour fields with grain, photograph-like to the
    decoder (random noise alone would cost it far more than a photograph does)."""
    import io

    from PIL import Image

    rng = np.random.default_rng(seed)
    files = []
    for _ in range(n):
        colours = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
        coarse = colours.resize((side, side), Image.Resampling.BICUBIC)
        grain = rng.normal(0.0, 8.0, (side, side, 3))
        pixels = np.clip(np.asarray(coarse, dtype=np.float64) + grain, 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=JPEG_QUALITY)
        files.append(buffer.getvalue())
    return files


def image_workload(contract, n: int = DEFAULT_TEXTS, side: int = IMAGE_SIDE) -> Workload:
    """n different JPEG files, one a request row; refused in one line for a model that takes no images."""
    if contract.image_input is None:
        inputs = ", ".join(t.name for t in contract.text_inputs)
        raise TritonizeError(f"the {IMAGES} workload sends images; this {contract.name} model takes texts alone "
                             f"({inputs})", hint=f"choose from {', '.join(TEXT_WORKLOADS)}")
    return Workload(IMAGES, [(data,) for data in jpeg_images(n, side)], [],
                    f"{n} JPEG files of {side}x{side} pixels, one a request, each different", images=True)


def request_of(contract, workload: Workload) -> Callable[[Sequence[Row]], dict[str, list]]:
    """How a request's rows become the ensemble's inputs: its images, or its texts (a column per text input)."""
    if workload.images:
        return lambda rows: contract.image_request([row[0] for row in rows])
    return contract.request


def workloads_for(chain, task, names: list[str], corpus_file: Path | None, short_tokens: int,
                  long_tokens: int) -> dict[str, Workload]:
    """The named workloads, in order; texts counted by the served steps run in-process (what bench and tune both
    measure)."""
    texts = [n for n in names if n != IMAGES]
    built = build_workloads(texts, chain.lengths, chain.max_length, read_corpus(corpus_file), short_tokens,
                            long_tokens, row=task.contract.row_for) if texts else {}
    if IMAGES in names:
        built[IMAGES] = image_workload(task.contract)
    return {n: built[n] for n in names}
