"""Benchmark workloads: texts of an exact token count, and the shipped mixed-length corpus.

Token counts are those of the served tokenizer (special tokens included), so
a "16-token" text fills the 16 bucket exactly and every system computes the
same number of tokens for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TritonizeError
from ..paths import DATA_DIR

MIXED_CORPUS = DATA_DIR / "corpus_mixed.txt"
WORKLOADS = ("short", "long", "mixed")
DEFAULT_SHORT_TOKENS = 16
DEFAULT_LONG_TOKENS = 128
DEFAULT_TEXTS = 256

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class Workload:
    """A named list of texts, sent in this order (the arrival order)."""

    name: str
    texts: list[str]
    tokens: list[int] = field(repr=False)  # per text, after truncation to the model's max length
    description: str = ""

    def summary(self) -> dict:
        t = np.asarray(self.tokens)
        return {
            "texts": len(self.texts),
            "description": self.description,
            "tokens": {
                "min": int(t.min()),
                "p50": float(np.percentile(t, 50)),
                "mean": round(float(t.mean()), 1),
                "p90": float(np.percentile(t, 90)),
                "max": int(t.max()),
            },
            "non_ascii_texts": sum(any(ord(c) > 127 for c in s) for s in self.texts),
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


def token_counter(encoder) -> CountTokens:
    """Token count of one text with the served tokenizer (TextEncoder), special tokens included."""
    return lambda text: len(encoder.tokenizer.encode(text).ids)


def exact_length_texts(words: list[str], target: int, n: int, count: CountTokens) -> list[str]:
    """n distinct texts of exactly `target` tokens, made of consecutive corpus words.

    Word piece counts add up across whitespace, so words are taken greedily
    and the remainder is filled with the next words that still fit; every text
    is checked with a full encode.
    """
    empty = count("")
    if target <= empty:
        raise TritonizeError(f"cannot build {target}-token texts: the tokenizer adds {empty} special tokens")
    cost: dict[str, int] = {}

    def word_cost(w: str) -> int:
        if w not in cost:
            cost[w] = count(w) - empty
        return cost[w]

    texts: list[str] = []
    seen: set[str] = set()
    start, attempts = 0, 0
    while len(texts) < n and attempts < 20 * n:
        attempts += 1
        chosen, used, i = [], empty, start
        for _ in range(4 * target + 200):
            w = words[i % len(words)]
            i += 1
            c = word_cost(w)
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
        raise TritonizeError(f"could only build {len(texts)} of {n} texts of {target} tokens from the corpus")
    return texts


def build_workloads(
    names: list[str],
    count: CountTokens,
    max_length: int,
    corpus: list[str],
    short_tokens: int = DEFAULT_SHORT_TOKENS,
    long_tokens: int = DEFAULT_LONG_TOKENS,
    n_texts: int = DEFAULT_TEXTS,
) -> dict[str, Workload]:
    """The requested workloads; fixed lengths are capped at the model's max length."""
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise TritonizeError(f"unknown workload(s): {', '.join(unknown)}", hint=f"choose from {', '.join(WORKLOADS)}")
    words = [w for line in corpus for w in line.split()]
    result: dict[str, Workload] = {}
    for name in names:
        if name == "mixed":
            result[name] = Workload(
                name, list(corpus), [count(t) for t in corpus], f"shipped corpus, {len(corpus)} texts of mixed length"
            )
            continue
        target = min(short_tokens if name == "short" else long_tokens, max_length)
        texts = exact_length_texts(words, target, n_texts, count)
        result[name] = Workload(name, texts, [target] * len(texts), f"{len(texts)} texts of exactly {target} tokens")
    return result


def workloads_for(
    encoder, names: list[str], corpus_file: Path | None, short_tokens: int, long_tokens: int
) -> dict[str, Workload]:
    """The named workloads, counted with the served tokenizer (what bench and tune both measure)."""
    return build_workloads(names, token_counter(encoder), encoder.max_length, read_corpus(corpus_file), short_tokens, long_tokens)


def require_single_text(manifest) -> None:
    """The workloads are single texts answered by the graph itself (the floor runs the same graph): a model
    that takes pairs, or whose answer comes from a served step after the graph, is refused with one line."""
    from .. import tasks
    from ..spec import TEXT_INPUT

    task = tasks.of(manifest.model.head)
    names = [t.name for t in task.text_inputs]
    if names != [TEXT_INPUT]:
        found = f"takes {', '.join(names)}"
    elif task.post_module or task.orchestrates:
        found = "answers through a post-processing step the floor does not run"
    else:
        return
    raise TritonizeError(
        f"the benchmark sends one {TEXT_INPUT} per request and compares with the graph alone; a {task.name} model {found}",
        hint="bench and tune measure embedding and classification repositories",
    )
