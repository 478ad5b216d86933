"""What a task is when a repository is built: the one place everything task-specific is asked for.

A task package (embedding/, classification/, ...) declares in task.py one `Task`: its contract, its pipeline and
options, and a part per concern, each a small class: the `Detector` (model folder -> head), `Tokens` (how the
tokenizer step makes rows), the `Ensemble` (what the repository serves), the `Exporter` (the model's own class,
wrapped so that the graph returns the served outputs), the `Verifier` (the reference the answers are held to),
the `Calibrator` (what generation records, what int8 keeps) and the benchmark's `Peer`. contract.py holds how its
answers are read (contract.py at this level says why). `generate`, `verify` and the repository writer ask the
task's parts; they never branch on its name.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..spec import TOKEN_INPUTS, Head, ModelSpec, Options, Pipeline, TaskOption, TensorSpec, TokenizeModel, WarmupInputs
from .contract import TaskContract

if TYPE_CHECKING:
    from ..folder import ModelFolder
    from ..serving.chat import PairTemplate
    from ..serving.multi_vector import Form

FLOAT = "TYPE_FP32"  # fp16 graphs keep fp32 inputs and outputs (keep_io_types), so clients never see fp16


# What verification feeds every one-text task: short, long, cut at the max length, non-ASCII.
SENTENCES = [
    "Hello!",
    "Triton serves raw strings.",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "Machine learning engineers deploy transformer models to production every day.",
    "Ünïcödé: café, naïve, Zürich, São Paulo, Kraków.",
    "日本語のテキストも正しくトークン化されるべきです。",
    "Ein Satz auf Deutsch, um mehrsprachige Eingaben zu prüfen.",
    "Emoji and symbols 🚀✨ — “quotes”, ‘apostrophes’ and ∑ math ≤ ≥.",
    "   leading and trailing whitespace   ",
    "What is the capital of France? Paris is the capital of France.",
    " ".join(["This sentence is repeated to produce a long input that is cut at the maximum length."] * 40),
    " ".join(f"word{i}" for i in range(300)),
    "short",
    "The server keeps serving after bad input, and batching merges requests of the same length.",
    "Dynamic batching, ensembles and Python backends are features of the Triton Inference Server.",
]


CALIBRATION_CORPUS = "verification corpus"  # the calibration source where no file is given


def text_lines(path: str | Path, flag: str) -> list[str]:
    """The non-blank lines of a user's text file given to `flag`; one that cannot be read is refused in one line."""
    from ..errors import TritonizeError

    try:
        return [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise TritonizeError(f"{flag} {path}: cannot be read as UTF-8 text ({type(exc).__name__}: "
                             f"{getattr(exc, 'strerror', None) or exc})", hint="give a text file, one text per line") from None


def calibration_texts(path: str | None) -> tuple[str, list[str]]:
    """(source, texts) a calibrating task runs the served graph on: the file's non-blank lines (`--calibration`),
    else SENTENCES. A file that cannot be read as UTF-8 text of at least two texts is refused in one line."""
    from ..errors import TritonizeError

    if path is None:
        return CALIBRATION_CORPUS, list(SENTENCES)
    file = Path(path)
    texts = text_lines(path, "--calibration")
    if len(texts) < 2:
        raise TritonizeError(f"--calibration {path} holds {len(texts)} non-blank line(s): ranges need at least two texts",
                             hint="give a text file, one text per line, as many as the corpus you will embed")
    return file.name, texts


@dataclass(frozen=True)
class DerivedAnswer:
    """An answer a client may ask for besides the served one (an embedding cut to a Matryoshka size, a reranker's
    activated score), derived from the served output by the package's own code, with the model library's own
    answer of that kind to hold it to."""

    name: str
    reference: np.ndarray
    derive: Callable[[np.ndarray], np.ndarray]  # the served output -> this form


class Part:
    """One concern of a task, bound to the task it serves (`task`: its contract, and its other parts)."""

    def __init__(self, task: Task) -> None:
        self.task = task

    @property
    def contract(self) -> TaskContract:
        return self.task.contract


class Detector(Part, abc.ABC):
    """Model folder -> head: whether a folder is this task's, and the head it declares."""

    # How specific detect() is: where several tasks claim a folder, the most specific serves it (a task for NLI
    # classifiers would outrank classification, which claims every sequence classifier of two labels or more).
    # Two claims of one specificity are a bug in their detect(), and refused.
    specificity: ClassVar[int] = 0

    @abc.abstractmethod
    def detect(self, folder: ModelFolder) -> bool:
        """True when the folder's own head is this task's, so it is chosen without --task (the most specific
        claim wins: `specificity`)."""

    def accepts(self, folder: ModelFolder) -> bool:
        """Whether --task may name this task for the folder: only where it is the folder's own head."""
        return self.detect(folder)

    @abc.abstractmethod
    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        """The head as the folder declares it, with the user's overrides; refuse what cannot be served."""

    @abc.abstractmethod
    def describe(self, head: Head) -> str:
        """A few words for progress output and the repository README."""

    def labels(self, head: Head) -> tuple[str, ...]:
        """Class names, index order, for Triton's classification extension (none by default)."""
        return ()


class Tokens(Part):
    """How the served tokenizer step makes a head's rows."""

    # How the tokenizer step cuts a text (or a pair) at the max length; None: the tokenizer's default.
    truncation: ClassVar[str | None] = None
    # Whether a text past the max length loses its end (so --no-truncate can refuse it instead).
    truncates: ClassVar[bool] = True

    def truncation_for(self, head: Head) -> str | None:
        """How the tokenizer step cuts this head's rows: `truncation`, unless a head reads its rows otherwise
        (a causal-LM reranker's pair is rendered into one text, cut at its end)."""
        return self.truncation

    def pair_template(self, head: Head) -> PairTemplate | None:
        """The chat template a head renders its pairs through in the tokenizer step (serving/chat.py); None: the
        tokenizer's own pair encoding."""
        return None

    def token_inputs(self, folder: ModelFolder, tokenizer_inputs: tuple[str, ...]) -> tuple[str, ...]:
        """The token tensors the graph takes; one text per row needs no token_type_ids (all zeros)."""
        return TOKEN_INPUTS

    def declared_max_length(self, folder: ModelFolder, options: Options) -> int | None:
        """The longest row the model's library makes, where the task reads it better than the folder's configs
        do (a late-interaction model's longer form); None: the folder's declared max length."""
        return None

    def served_tokenizer(self, folder: ModelFolder, options: Options) -> Any:
        """The transformers tokenizer the served steps tokenize with, where the model's library changes the
        folder's (special tokens it registers); None: the folder's own, as AutoTokenizer loads it."""
        return None

    def forms(self, head: Head) -> tuple[Form, ...]:
        """The forms a row may take, each tokenized as the head declares (serving/multi_vector.py); (): one."""
        return ()


class Ensemble(Part, abc.ABC):
    """What the repository serves for a head: the ensemble's and the graph's outputs, and its steps' parameters."""

    @abc.abstractmethod
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:
        """What the ensemble returns."""

    def graph_outputs(self, head: Head) -> tuple[TensorSpec, ...]:
        """What the exported graph returns, in order: the ensemble's outputs, unless a post step follows."""
        return self.outputs(head)

    def post_parameters(self, spec: ModelSpec) -> dict[str, str]:
        """The post step's configuration parameters (none without a post step)."""
        return {}

    def ensemble_parameters(self, head: Head) -> dict[str, str]:
        """What the ensemble's configuration tells clients about the head (none by default)."""
        return {}

    def warmup_inputs(self, head: Head) -> WarmupInputs:
        """Warm-up samples the model step runs beyond one row of each token bucket: (name, dims of the inputs
        that are not tokens), where a branch of the graph no token bucket reaches must run before traffic."""
        return ()

    def first_parameters(self, spec: ModelSpec, model_step: str, max_batch_size: int) -> dict[str, str]:
        """Parameters the first step needs beyond the tokenizer's (an orchestrating step: whom to call)."""
        return {}


class Exporter(Part, abc.ABC):
    """The model in its own library's class, as the graph exports it and verification feeds it."""

    @abc.abstractmethod
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        """The model with its own transformers class, wrapped to return the graph's outputs (a torch.nn.Module).

        eager=True forces eager attention, which exports to plain MatMul/Softmax
        that onnxruntime's optimizer can fuse.
        """

    def export_graph(self, spec: ModelSpec, graph: Any, path: Path, opset: int) -> Path | None:
        """The task's own ONNX export of `graph` to `path`, where one traced forward cannot hold it (two towers
        behind one `If`); None: export.py's trace of the forward."""
        return None

    def graph_feeds(self, spec: ModelSpec, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's inputs for the verification texts, from the served tokenizer's (the graph's other inputs,
        where it takes more than token tensors); by default the token tensors themselves."""
        return feeds

    def comparable(self, out: np.ndarray, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The graph's first output as verification compares it (per-token outputs drop padded positions)."""
        return out

    def other_checks(self, spec: ModelSpec, graph: Any, path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Besides the texts: the graph at `path` on inputs of other kinds (images) and on what joins them
        (cross-modal similarities), by name, each as (the model library's answer, the graph's), which verification
        compares under the stage's check; {} where the texts are all a task reads."""
        return {}


class Verifier(Part):
    """What the served answers are held to: the model's own library on the verification rows."""

    # Verification also demands the same argmax as the reference on every sentence.
    same_argmax: ClassVar[bool] = False
    # Which of the graph's outputs verification compares with the reference (output_names' order).
    verified_output: ClassVar[int] = 0

    def verification_rows(self) -> list[tuple[str, ...]]:
        """What verification feeds the graph and the reference: one text per row, or pairs."""
        return [(s,) for s in SENTENCES]

    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        """(what was used, the first output) on `rows`: by default the model's own class, each row
        tokenized by transformers' own tokenizer and run alone, so tokenization is checked too.
        Per-token outputs are zero-padded to the longest row."""
        import torch
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(spec.source, trust_remote_code=spec.trust_remote_code)
        truncation = self.task.tokens.truncation or True
        outputs = []
        with torch.no_grad():
            for row in rows:
                enc = tokenizer(*row, truncation=truncation, max_length=spec.max_length, return_tensors="pt")
                out = graph(*(enc[n] for n in spec.input_names))
                outputs.append((out[0] if isinstance(out, tuple) else out)[0].numpy())
        if all(o.shape == outputs[0].shape for o in outputs):
            return "transformers", np.stack(outputs)
        stacked = np.zeros((len(outputs), max(len(o) for o in outputs)) + outputs[0].shape[1:], dtype=outputs[0].dtype)
        for r, o in enumerate(outputs):
            stacked[r, : len(o)] = o
        return "transformers", stacked

    def served_check(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]],
                     graph_out: list[np.ndarray]) -> dict | None:
        """The whole answer (post-processing included) against the model's library, where the graph's
        outputs are not yet the answer: {"reference", "rows", "agree", "passed"}; None otherwise."""
        return None

    def derived_answers(self, spec: ModelSpec, rows: list[tuple[str, ...]]) -> tuple[DerivedAnswer, ...]:
        """The answers the head declares besides the served one, derived from it, each verified on the served
        graph (none by default)."""
        return ()


class Calibrator(Part):
    """What generation records of the served graph's answers, and what int8 must keep of them."""

    # What int8 must keep of the fp32 graph on the shipped corpus, in words; None: int8 is not offered,
    # because nothing here measures what this task's answers lose to it.
    int8_figure: ClassVar[str | None] = None
    # Whether generation records something of the served graph's answers on calibration texts (`calibration`).
    calibrates: ClassVar[bool] = False

    def calibration(self, spec: ModelSpec, served: np.ndarray, source: str, graph: Path) -> dict | None:
        """What the repository records of the served graph's answers on the calibration texts (QUANTIZATION_FILE
        beside each version's graph), for the API to read; `graph` for inputs of other kinds; None: nothing."""
        return None

    def int8_kept(self, fp32: np.ndarray, int8: np.ndarray) -> float:
        """The share of `int8_figure` the int8 graph keeps, from both graphs' first output on the corpus rows."""
        raise NotImplementedError(f"{self.task.name} offers no int8")


class Peer(Part):
    """The benchmark's side of a task: what a hand-written PyTorch server answers, and the baseline's rows."""

    def doc_answers(self, spec: ModelSpec, model: Any, tokenizer: Any, rows: list[tuple[str, ...]]) -> tuple[list, int, int]:
        """What a hand-written PyTorch server computes for one batch of rows (the benchmark's doc baseline):
        (one JSON-able answer per row, {output name: value} as the ensemble names them, real tokens,
        padded tokens). By default: transformers' tokenizer (pairs as pairs), one batch padded to its
        longest row, the graph's outputs."""
        import torch

        batch = tokenizer(*(list(c) for c in zip(*rows)), padding=True, truncation=self.task.tokens.truncation or True,
                          max_length=spec.max_length, return_tensors="pt")
        with torch.inference_mode():
            out = model(*(batch[n] for n in spec.input_names))
        columns = [o.tolist() for o in (out if isinstance(out, tuple) else (out,))]
        names = [t.name for t in self.task.ensemble.graph_outputs(spec.head)]
        mask = batch["attention_mask"]
        return [dict(zip(names, r)) for r in zip(*columns)], int(mask.sum()), int(mask.numel())

    def baseline_rows(self, texts: list[str], lines: bool = False) -> list[tuple[str, ...]]:
        """Request rows made of texts, for the output statistics' baseline: a text per row; a pair task puts
        its verification rows' first texts (queries, questions) before them in turn, or (`lines` of a user's
        file) splits each line at its one tab."""
        from ..errors import TritonizeError

        if len(self.contract.text_inputs) == 1:
            return [(t,) for t in texts]
        if not lines:
            firsts = [row[0] for row in self.task.verifier.verification_rows()]
            return [(firsts[k % len(firsts)], text) for k, text in enumerate(texts)]
        bad = next((k for k, t in enumerate(texts) if t.count("\t") != 1), None)
        if bad is not None:
            names = " and ".join(t.name for t in self.contract.text_inputs)
            raise TritonizeError(f"--baseline: line {bad + 1} is not two texts split by one tab ({names}), as every "
                                 f"line must be for {self.task.name}")
        return [tuple(t.split("\t")) for t in texts]


# A task's parts: the attribute its instance holds each in, the class attribute that declares it, and its base.
PARTS: dict[str, tuple[str, type[Part]]] = {
    "detector": ("Detector", Detector), "tokens": ("Tokens", Tokens), "ensemble": ("Ensemble", Ensemble),
    "exporter": ("Exporter", Exporter), "verifier": ("Verifier", Verifier), "calibrator": ("Calibrator", Calibrator),
    "peer": ("Peer", Peer),
}


class Task:
    """A task's declaration: its contract, its pipeline and options, and one part per concern (PARTS), each
    declared as a class attribute (`Detector = EmbeddingDetector`) and bound to the task as it is made
    (`task.detector`). A part that is missing, not of its kind, abstract, or declared under a name tritonize does not
    read fails as the task is made (`checked_parts`), naming it."""

    contract: ClassVar[TaskContract]  # how the task's answers are read (its name, head and tensors are declared there)
    summary: ClassVar[str]  # one line: what goes in, what comes out
    serves: ClassVar[str]  # which folders, in a few words (refusals list them)
    # The steps its ensemble runs and how their tensors connect (spec/pipeline.py's shapes).
    pipeline: ClassVar[Pipeline] = TokenizeModel()
    # The options of `tritonize generate` only this task reads (fields of GenerateOptions, and their flags).
    own_options: ClassVar[tuple[TaskOption, ...]] = ()
    Detector: ClassVar[type[Detector]]
    Tokens: ClassVar[type[Tokens]] = Tokens
    Ensemble: ClassVar[type[Ensemble]]
    Exporter: ClassVar[type[Exporter]]
    Verifier: ClassVar[type[Verifier]] = Verifier
    Calibrator: ClassVar[type[Calibrator]] = Calibrator
    Peer: ClassVar[type[Peer]] = Peer

    detector: Detector
    tokens: Tokens
    ensemble: Ensemble
    exporter: Exporter
    verifier: Verifier
    calibrator: Calibrator
    peer: Peer

    def __init__(self) -> None:
        for attribute, part in checked_parts(type(self)).items():
            setattr(self, attribute, part(self))

    @property
    def name(self) -> str:
        return self.contract.name

    @property
    def head_type(self) -> type[Head]:
        return self.contract.head_type


def checked_parts(task: type[Task]) -> dict[str, type[Part]]:
    """Each part a task class declares, by the attribute its instance holds it in, once every one is there, of
    its kind and whole; else one line naming the part."""
    from ..errors import TritonizeError

    where, declared = f"{task.__module__}.{task.__qualname__}", [name for name, _ in PARTS.values()]
    for name in dir(task):
        value = getattr(task, name, None)
        if isinstance(value, type) and issubclass(value, Part) and name not in declared:
            raise TritonizeError(f"{where} declares the part {name}, which tritonize does not read",
                                 hint=f"a task declares {', '.join(declared)}")
    found = {}
    for attribute, (name, base) in PARTS.items():
        part = getattr(task, name, None)
        if part is None:
            raise TritonizeError(f"{where} declares no {name}", hint=f"{name} = a subclass of {base.__qualname__}")
        if not (isinstance(part, type) and issubclass(part, base)):
            raise TritonizeError(f"{where}.{name} is not a subclass of {base.__qualname__}", hint=f"{name} = a subclass of it")
        missing = sorted(getattr(part, "__abstractmethods__", ()))
        if missing:
            raise TritonizeError(f"{where}.{name} ({part.__qualname__}) does not define {', '.join(missing)}")
        found[attribute] = part
    return found


def refuse_foreign_flags(options: Options, allowed: tuple[TaskOption, ...], what: str) -> None:
    """Refuse another task's options (every task's are `options.task_options`) rather than ignore them."""
    given = [o.flag for o in options.task_options if o not in allowed and getattr(options, o.field) is not None]
    if given:
        from ..errors import TritonizeError

        raise TritonizeError(f"{' and '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to {what}")


def pair_token_inputs(folder: ModelFolder, tokenizer_inputs: tuple[str, ...]) -> tuple[str, ...]:
    """A pair's tensors: token_type_ids too where the model has segment embeddings and its tokenizer feeds them."""
    from ..serving.batching import TOKEN_TYPE_IDS

    return TOKEN_INPUTS + ((TOKEN_TYPE_IDS,) if folder.uses_token_types(tokenizer_inputs) else ())


def library_model(loader: Any, spec: ModelSpec, own_types: tuple[str, ...] = (), **kwargs: Any) -> Any:
    """The folder in sentence-transformers' `loader` class (SentenceTransformer, CrossEncoder, SparseEncoder,
    MultiVectorEncoder). The library converts a folder saved as another model type into the loader's (a
    MultiVectorEncoder into a mean-pooled SentenceTransformer): that is another model, so it is refused, never
    exported or verified against. `own_types`: the earlier names of the loader's own model type, whose layouts
    it reads as they were written (PyLate's "ColBERT" for MultiVectorEncoder), not converted."""
    from ..errors import TritonizeError
    from ..folder import saved_model_type

    path = spec.sentence_transformers_dir or spec.source
    saved = saved_model_type(path)
    if saved is not None and saved != loader.model_type and saved not in own_types:
        raise TritonizeError(
            f"{path} was saved as a sentence-transformers {saved}, and {loader.__name__} would convert it into "
            f"another model",
            hint="tritonize exports and verifies a folder only as the model type it was saved as",
        )
    return loader(path, device="cpu", trust_remote_code=spec.trust_remote_code, **kwargs)


def load_pretrained(auto_class: Any, spec: ModelSpec, eager: bool, allow_missing: tuple[str, ...] = ()) -> Any:
    """The folder's weights in `auto_class`, in eval mode. A load that leaves weights newly
    initialised (a head the folder does not have) is refused: it would serve random numbers."""
    from ..errors import TritonizeError

    kwargs = {"attn_implementation": "eager"} if eager else {}
    try:
        model, info = auto_class.from_pretrained(
            spec.source, trust_remote_code=spec.trust_remote_code, output_loading_info=True, **kwargs
        )
    except Exception as exc:  # noqa: BLE001
        raise TritonizeError(f"transformers could not load {spec.source}: {exc}") from exc
    missing = [k for k in info.get("missing_keys", ()) if not any(k.startswith(p) for p in allow_missing)]
    if missing:
        raise TritonizeError(
            f"loading {spec.source} as {type(model).__name__} leaves {len(missing)} weight(s) newly initialised "
            f"({', '.join(sorted(missing)[:3])}{', ...' if len(missing) > 3 else ''})",
            hint="the folder does not hold this head; check --task",
        )
    return model.eval()
