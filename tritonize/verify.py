"""The exported graph against the model's own class or library, on real sentences -> a typed report.

The sentences are fixed and varied: short, long, cut at the max length,
non-ASCII. They are tokenized by the served tokenizer code itself. The task
says what the reference is (sentence-transformers' encode, or the model's
own transformers class) and whether the argmax must agree too.
Tolerances: max-abs for fp32 graphs, cosine for fp16 graphs. An int8 graph is held to a per-text cosine
against the reference and, on the shipped corpus, to what its task keeps of the fp32 graph (embeddings:
top-10 retrieval overlap; classifiers: argmax agreement). The answers a head declares besides the served one,
derived from it (Matryoshka sizes, a reranker's activated score), are derived from the served graph's output and
held to the same check as it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import tasks
from .console import phase
from .errors import TritonizeError
from .serving.batching import ATTENTION_MASK
from .serving.tokenizer import TextEncoder
from .spec import ModelSpec



@dataclass
class StageResult:
    """One graph (export, optimize or fp16) against the reference."""

    max_abs: float
    mean_abs: float
    min_cosine: float
    argmax_agreement: float
    metric: str  # which check applied: max_abs (fp32) or min_cosine (fp16, int8)
    threshold: float
    passed: bool
    precision: str
    # int8 only: what the task keeps of the fp32 graph on the shipped corpus
    # {"figure": ..., "value": ..., "threshold": ..., "rows": ...}
    kept: dict | None = None

    @property
    def value(self) -> float:
        return float(getattr(self, self.metric))


@dataclass
class VerificationReport:
    """What verification.json holds: the seam between generation and the repository."""

    reference: str = ""
    task: str = ""
    output: str = ""
    sentences: int = 0
    token_lengths: dict = field(default_factory=dict)
    truncated: int = 0
    stages: dict[str, StageResult] = field(default_factory=dict)
    passed: bool | None = None
    seconds: float = 0.0
    export_seconds: dict[str, float] | None = None
    answers: dict | None = None  # the whole served answer against the model's library, where a step follows the graph
    derived: dict[str, StageResult] = field(default_factory=dict)  # answers derived from the served one (Matryoshka)
    # Each stage on inputs besides the texts and what joins them ("export: images", "export: image-text
    # similarities"), where the task reads more than texts (Exporter.other_checks).
    others: dict[str, StageResult] = field(default_factory=dict)
    skipped: bool = False

    @classmethod
    def skipped_report(cls) -> VerificationReport:
        return cls(skipped=True, passed=None)

    def to_dict(self) -> dict:
        if self.skipped:
            return {"skipped": True, "passed": None}
        data = asdict(self)
        data.pop("skipped")
        for optional in ("export_seconds", "answers", "derived", "others"):
            if not data[optional]:
                data.pop(optional)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> VerificationReport:
        if data.get("skipped"):
            return cls.skipped_report()
        values = dict(data)
        for old in ("variants", "forms"):  # what the derived answers were called in files written before
            if old in values:
                values["derived"] = values.pop(old)
        for key in ("stages", "derived", "others"):
            values[key] = {k: StageResult(**v) for k, v in values.get(key, {}).items()}
        return cls(**values)

    def summary(self) -> str:
        """One line per stage for the generate output ('' when skipped)."""
        return "  ".join(
            [f"{n}: max-abs {r.max_abs:.2e}, cosine {r.min_cosine:.6f}"
             + (f", {r.kept['figure']} {r.kept['value']:.3f} on {r.kept['rows']} corpus texts" if r.kept else "")
             for n, r in self.stages.items()]
            + [f"{n}: {r.metric.replace('_', '-')} {r.value:.2e}" for n, r in [*self.derived.items(), *self.others.items()]]
        )


def encoder_for(spec: ModelSpec) -> TextEncoder:
    """The served tokenizer with the model's max length, padding to the longest row."""
    task = tasks.of(spec.head)
    truncation = task.tokens.truncation_for(spec.head) or "longest_first"
    return TextEncoder(spec.tokenizer_file, spec.max_length, [spec.max_length], spec.pad_token_id, spec.input_names, truncation,
                       template=task.tokens.pair_template(spec.head), forms=task.tokens.forms(spec.head))


def encode(encoder: TextEncoder, rows: list) -> dict[str, np.ndarray]:
    return encoder.encode([r[0] if len(r) == 1 else tuple(r) for r in rows], width=0)


def tokenize(spec: ModelSpec, rows: list) -> dict[str, np.ndarray]:
    """The served tokenizer's encoding of texts (or pairs) with the model's max length, padded to the longest."""
    return encode(encoder_for(spec), rows)


def run_onnx(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def compare(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """Per row (per-token outputs flattened to one row per text)."""
    ref = reference.astype(np.float64).reshape(len(reference), -1)
    cand = candidate.astype(np.float64).reshape(len(candidate), -1)
    cos = (ref * cand).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1) + 1e-12)
    return {
        "max_abs": float(np.abs(ref - cand).max()),
        "mean_abs": float(np.abs(ref - cand).mean()),
        "min_cosine": float(cos.min()),
        "argmax_agreement": float((ref.argmax(1) == cand.argmax(1)).mean()),
    }


# int8 must keep this much of its task's figure on the shipped corpus (top-10 overlap, argmax agreement).
INT8_MIN_KEPT = {"top-10 retrieval overlap": 0.9, "argmax agreement": 0.99}
INT8_STAGE = "int8"


Batch = tuple[np.ndarray, dict[str, np.ndarray]]  # row indices, and their feeds


def length_sorted_batches(spec: ModelSpec, rows: list, size: int = 32) -> list[Batch]:
    """Rows tokenized once, in batches of similar length (little padding), for every graph to run."""
    encoder = encoder_for(spec)
    order = np.argsort(encode(encoder, rows)[ATTENTION_MASK].sum(1), kind="stable")
    parts = [order[lo : lo + size] for lo in range(0, len(rows), size)]
    return [(part, encode(encoder, [rows[i] for i in part])) for part in parts]


def run_batches(path: Path, batches: list[Batch]) -> np.ndarray:
    """The graph's first output on every batch's rows, back in row order."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: dict[int, np.ndarray] = {}
    for part, feeds in batches:
        out.update(zip(part.tolist(), session.run(None, feeds)[0]))
    return np.stack([out[i] for i in range(len(out))])


def int8_kept(spec: ModelSpec, fp32: Path, int8: Path) -> dict:
    """What the int8 graph keeps of the fp32 graph on the shipped corpus, as its task measures it."""
    from .bench.corpus import read_corpus

    task = tasks.of(spec.head)
    rows = [task.contract.row_for(text) for text in read_corpus()]
    batches = length_sorted_batches(spec, rows)
    value = task.calibrator.int8_kept(run_batches(fp32, batches), run_batches(int8, batches))
    threshold = INT8_MIN_KEPT[task.calibrator.int8_figure]
    return {"figure": task.calibrator.int8_figure, "value": round(value, 4), "threshold": threshold, "rows": len(rows),
            "passed": value >= threshold}


def verify(spec: ModelSpec, graph, stages: dict[str, Path], fp16_stages: set[str], atol: float, min_cosine: float,
           min_cosine_int8: float = 0.99) -> VerificationReport:
    """Compare each ONNX stage with the task's reference; the report says which check applied and whether it passed."""
    task = tasks.of(spec.head)
    start = time.perf_counter()
    rows = task.verifier.verification_rows()
    feeds = task.exporter.graph_feeds(spec, tokenize(spec, rows))

    def judged(name: str, metrics: dict[str, float], kept: dict | None = None) -> StageResult:
        """A stage's (or a form of its answer's) figures under that stage's check."""
        if name == INT8_STAGE:
            check = {"metric": "min_cosine", "threshold": min_cosine_int8,
                     "passed": metrics["min_cosine"] >= min_cosine_int8 and (kept is None or kept["passed"])}
        elif name in fp16_stages:
            check = {"metric": "min_cosine", "threshold": min_cosine, "passed": metrics["min_cosine"] >= min_cosine}
        else:
            ok = metrics["max_abs"] <= atol and (not task.verifier.same_argmax or metrics["argmax_agreement"] == 1.0)
            check = {"metric": "max_abs", "threshold": atol, "passed": ok}
        precision = INT8_STAGE if name == INT8_STAGE else "fp16" if name in fp16_stages else "fp32"
        return StageResult(**metrics, **check, precision=precision, kept=kept)

    with phase(f"Verifying {len(stages)} graph(s) on {len(rows)} inputs"):
        reference_name, reference = task.verifier.reference(spec, graph, rows)
        results, others = {}, {}
        for name, path in stages.items():
            graph_out = run_onnx(path, feeds)
            served_out = task.exporter.comparable(graph_out[task.verifier.verified_output], feeds)
            kept = int8_kept(spec, stages["export"], path) if name == INT8_STAGE else None
            results[name] = judged(name, compare(reference, served_out), kept)
            others.update({f"{name}: {what}": judged(name, compare(*pair))
                           for what, pair in task.exporter.other_checks(spec, graph, path).items()})
        # Once, on the last stage: what gets served.
        served = task.verifier.served_check(spec, graph, rows, graph_out)
        derived = {d.name: judged(name, compare(d.reference, d.derive(served_out))) for d in task.verifier.derived_answers(spec, rows)}
    lengths = feeds[ATTENTION_MASK].sum(1)
    return VerificationReport(
        reference=reference_name,
        task=task.name,
        output=task.contract.output_names[task.verifier.verified_output],
        sentences=len(rows),
        token_lengths={"min": int(lengths.min()), "max": int(lengths.max()), "max_length": spec.max_length},
        truncated=int((lengths >= spec.max_length).sum()),
        stages=results,
        answers=served,
        derived=derived,
        others=others,
        passed=all(r.passed for r in [*results.values(), *derived.values(), *others.values()]) and (served is None or served["passed"]),
        seconds=round(time.perf_counter() - start, 3),
    )


def check(report: VerificationReport) -> None:
    """Exit non-zero, with the numbers, when a tolerance is exceeded."""
    failed = {name: r for name, r in [*report.stages.items(), *report.derived.items(), *report.others.items()]
              if not r.passed}
    if report.answers and not report.answers["passed"]:
        a = report.answers
        raise TritonizeError(
            f"the served answers differ from the {a['reference']} on {a['rows'] - a['agree']} of {a['rows']} inputs",
            hint="this model's outputs cannot be served exactly; please report it",
        )
    if failed:
        same_argmax = tasks.get(report.task).verifier.same_argmax
        detail = "; ".join(
            f"{name}: {r.metric} {r.value:.3g} vs {r.threshold:.3g}"
            + (f", argmax agreement {r.argmax_agreement:.2f}" if same_argmax else "")
            + (f", {r.kept['figure']} {r.kept['value']:.3g} vs {r.kept['threshold']:.3g} on the corpus" if r.kept else "")
            for name, r in failed.items()
        )
        raise TritonizeError(
            f"verification against {report.reference} failed ({detail})",
            hint="loosen with --atol / --min-cosine-fp16 / --min-cosine-int8 if this is expected, "
                 "or drop --optimize / --precision",
        )
