"""A generated repository's Python steps, loaded outside Triton exactly as the server loads them.

The in-process floor of the benchmark and the tests use the served modules
(`TextEncoder`, `OnnxRunner`, a task's post step or reader) configured from
the repository's own configs, handed over in the form Triton hands them to
a Python model: nothing here has settings of its own. `in_process` chains
them as the ensemble chains them, so the floor computes the whole answer. In a repository of several
models, `name` says which model's steps.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import tasks
from .manifest import read_manifest
from .repository import config_as_triton_passes_it, fused_config_name
from .serving.batching import ATTENTION_MASK, ROW_FIELDS
from .serving.onnx_model import OnnxRunner
from .serving.tokenizer import TextEncoder
from .spec import CONFIG_FILE, CONFIGS_DIR, FIRST, MODEL, POST, Pipeline, StepRole, repo_paths

Row = tuple[str, ...]  # one request row: a text, or a pair (query and document, question and context)


def _step(repo_dir: Path, role: StepRole, config: str, name: str | None = None) -> tuple[dict, str]:
    manifest = read_manifest(repo_dir, name)
    folder = repo_paths(repo_dir, manifest.name)[role.key]
    return config_as_triton_passes_it(folder / config), str(folder / str(manifest.version))


def text_encoder(repo_dir: Path, name: str | None = None) -> TextEncoder:
    """The served tokenizer of a repository's model (its Python step's, or the one its graphs were checked with)."""
    return served_step(repo_dir, read_manifest(repo_dir, name).pipeline, FIRST, name)


def onnx_runner(repo_dir: Path, intra_op_threads: int | None = None, shards: int | None = None,
                name: str | None = None) -> OnnxRunner:
    """The fused variant's model step (without one, the model step's graph as its config.pbtxt describes it to the
    chain); `intra_op_threads` and `shards` override its configuration (the floor's layouts)."""
    fused = f"{CONFIGS_DIR}/{fused_config_name(repo_dir)}.pbtxt"
    folder = repo_paths(repo_dir, read_manifest(repo_dir, name).name)[MODEL.key]
    config, version_dir = _step(repo_dir, MODEL, fused if (folder / fused).is_file() else CONFIG_FILE, name)
    return OnnxRunner.from_config(config, version_dir, threads=intra_op_threads, shards=shards)


def served_step(repo_dir: Path, pipeline: Pipeline, role: StepRole, name: str | None = None):
    """The logic of a model's Python step of `role`: the class its pipeline names (`Pipeline.served_classes`) in
    the step's served module, built from the step's config.pbtxt."""
    module = importlib.import_module(f"{__package__}.serving.{pipeline.served_module(role)}")
    served = getattr(module, pipeline.served_classes[role.key])
    config, version_dir = _step(repo_dir, role, CONFIG_FILE, name)
    if pipeline.runs_graph(role):  # a graph serves it: the Python step's class makes what the graph hands on
        return served.from_config(config, version_dir, outputs=(*read_manifest(repo_dir, name).model.input_names,
                                                                *ROW_FIELDS))
    return served.from_config(config, version_dir)


@dataclass
class Answer:
    """One request's outputs by name, and the tokens the model computed for it (real, and as padded)."""

    outputs: dict[str, np.ndarray]
    real_tokens: int
    padded_tokens: int


class TokenChain:
    """Tokenizer step, model step and the task's post step (if any), one request at a time."""

    def __init__(self, repo_dir: Path, intra_op_threads: int | None = None, shards: int | None = None,
                 name: str | None = None):
        manifest = read_manifest(repo_dir, name)
        task = tasks.of(manifest.model.head)
        self.text_inputs = [t.name for t in task.contract.text_inputs]
        self.encoder = served_step(repo_dir, manifest.pipeline, FIRST, name)
        self.runner = onnx_runner(repo_dir, intra_op_threads, shards, name)
        self.max_length = self.encoder.max_length
        self.post = served_step(repo_dir, task.pipeline, POST, name) if POST in task.pipeline.roles else None

    def lengths(self, row: Row) -> list[int]:
        """Tokens of each model row the request row becomes: one, special tokens included, after truncation."""
        return [int(self.encoder.encode([row[0] if len(row) == 1 else row], width=0)[ATTENTION_MASK].sum())]

    def count(self, row: Row) -> int:
        return sum(self.lengths(row))

    def __call__(self, rows: list[Row], runner: OnnxRunner | None = None, pad_to_longest: bool = False) -> Answer:
        """What the server answers for one request of `rows`: padded to a bucket and regrouped by the served
        model step (on `runner`, where given); with `pad_to_longest`, one plain run of the batch padded to its
        longest row (the floor's arrival-order batches)."""
        feeds = self.encoder.encode([r[0] if len(r) == 1 else r for r in rows], width=0 if pad_to_longest else None)
        model = runner or self.runner
        model_feeds = {n: feeds[n] for n in model.input_names}  # as the ensemble maps them
        outs, computed = model.run_or_regroup(model_feeds, plain=runner is not None and pad_to_longest)
        outputs = dict(zip(self.runner.output_names, outs))
        if self.post is not None:
            columns = {name: np.array([r[i] for r in rows], dtype=object).reshape(-1, 1) for i, name in enumerate(self.text_inputs)}
            outputs = self.post({**columns, **feeds, **outputs})
        outputs.update({n: feeds[n] for n in ROW_FIELDS if n in feeds})  # the tokenizer step's own, as served
        mask = feeds[ATTENTION_MASK]
        return Answer(outputs, int(mask.sum()), computed)


    def images(self, images: list[bytes]) -> Answer:
        """What the server answers for one request of encoded image files, where the first step reads images
        (its `encode_images`: a model whose contract declares an `image_input`)."""
        feeds = self.encoder.encode_images(images)
        outs, computed = self.runner.run_or_regroup({n: feeds[n] for n in self.runner.input_names}, plain=False)
        outputs = dict(zip(self.runner.output_names, outs))
        outputs.update({n: feeds[n] for n in ROW_FIELDS if n in feeds})
        return Answer(outputs, 0, computed)


class ReaderChain:
    """A first step that windows each row and calls the model step itself (question answering)."""

    def __init__(self, repo_dir: Path, intra_op_threads: int | None = None, shards: int | None = None,
                 name: str | None = None):
        task = tasks.of(read_manifest(repo_dir, name).model.head)
        self.reader = served_step(repo_dir, task.pipeline, FIRST, name)
        self.output_name = _step(repo_dir, FIRST, CONFIG_FILE, name)[0]["output"][0]["name"]
        self.runner = onnx_runner(repo_dir, intra_op_threads, shards, name)
        self.max_length = self.reader.max_seq_len

    def lengths(self, row: Row) -> list[int]:
        """Tokens of each model row the request row becomes: one per window."""
        return [len(w) for w in self.reader.windows(*row)]

    def count(self, row: Row) -> int:
        return sum(self.lengths(row))

    def __call__(self, rows: list[Row], runner: OnnxRunner | None = None, pad_to_longest: bool = False) -> Answer:
        padded = [0]

        def model(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            outs, computed = (runner or self.runner).run_or_regroup(feeds, plain=runner is not None and pad_to_longest)
            padded[0] += computed
            return dict(zip(self.runner.output_names, outs))

        pairs = [(context, self.reader.windows(question, context)) for question, context in rows]
        cells = self.reader.answer(pairs, model, width=0 if pad_to_longest else None)
        real = sum(len(w) for _, ws in pairs for w in ws)
        return Answer({self.output_name: np.array(cells, dtype=object).reshape(-1, 1)}, real, padded[0])


def in_process(repo_dir: Path, intra_op_threads: int | None = None, shards: int | None = None,
               name: str | None = None) -> TokenChain | ReaderChain:
    """A model's steps (the repository's only model, or `name`) chained as its ensemble chains them, in this process."""
    task = tasks.of(read_manifest(repo_dir, name).model.head)
    chain = ReaderChain if task.pipeline.orchestrates else TokenChain
    return chain(Path(repo_dir), intra_op_threads, shards, name)
