"""The single home of every name: tensors, files and folders of a repository, variants, step suffixes.

Served modules name the Hugging Face token tensors themselves (serving/batching.py); this module takes them from
there, so a name is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..serving.batching import (
    ATTENTION_MASK,
    INPUT_IDS,
    OFFSETS,
    SPECIAL_TOKENS_MASK,
    TOKEN_COUNT,
    TRUNCATED,
    TRUNCATION_DIRECTION,
    WINDOW_OVERLAP,
    WINDOWS,
)


# -- names: tensors ------------------------------------------------------------
TEXT_INPUT = "TEXT"  # the raw strings users send, BYTES [N, 1]
IMAGE_INPUT = "IMAGE"  # encoded image files (PNG, JPEG, WebP) users send, BYTES [N, 1]
# What an ensemble whose first step tokenizes also returns per row (serving/batching.py says why).
TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT = TOKEN_COUNT, TRUNCATED
# The request parameters the tokenizer step reads, TRUNCATION_DIRECTION, WINDOWS and WINDOW_OVERLAP, are
# serving/batching.py's (it says what each asks).
TOKEN_INPUTS: tuple[str, ...] = (INPUT_IDS, ATTENTION_MASK)  # tokenizer step -> model step (batching.py names them)
# What the tokenizer step can hand a post-processing step besides the model's inputs, and their dims.
TOKEN_EXTRAS: dict[str, tuple[int, ...]] = {OFFSETS: (-1, 2), SPECIAL_TOKENS_MASK: (-1,)}

# -- names: files and folders of a repository --------------------------------
CONFIG_FILE = "config.pbtxt"
FUSED_CONFIG_NAME = "fused"  # configs/fused.pbtxt: each model's config in the fused variant
# The name repositories written before took for the fused variant's configs (configs/local.pbtxt): still read
# and served, and kept for what is added to such a repository.
EARLIER_FUSED_CONFIG_NAME = "local"
CONFIGS_DIR = "configs"
# What a server serves of each model, by name: the production configs (each step's config.pbtxt, as NVIDIA's
# container loads them: the model step on the native onnxruntime backend, a Python tokenizer step, the ensemble)
# or the fused step (configs/fused.pbtxt: the tokenizer and the graph in one Python step).
PRODUCTION_VARIANT, FUSED_VARIANT = "production", "fused"
VARIANT_CONFIGS: dict[str, str | None] = {PRODUCTION_VARIANT: None, FUSED_VARIANT: FUSED_CONFIG_NAME}
DEFAULT_VARIANT = FUSED_VARIANT  # what the local server serves unless told
FIRST_VERSION = 1  # a new repository's version folders are 1/
MODEL_FILE = "model.onnx"
# The tokenizer as graphs (`generate --tokenizer graph`, the default where it is exact: tritonize/graph_tokenizer/):
# on a CPU the model step's production graph takes the texts (GRAPH_MODEL_FILE, beside MODEL_FILE, which
# verification and the in-process chain run) behind a first step whose graph checks each request's texts
# (TEXTS_GRAPH_FILE); on a GPU the first step's graph checks and tokenizes (TOKENIZER_GRAPH_FILE) and the model step
# keeps MODEL_FILE (spec/pipeline.py says why). Each step whose graph uses onnxruntime-extensions' operators names
# their library (GRAPH_LIBRARY_FILE) by its bare name, which every server tritonize starts finds
# (runtime/operator_library.py), and ships a copy in its folder.
GRAPH_MODEL_FILE = "model_text.onnx"
# Behind the Python tokenizer step on a CPU, the model step's production graph runs the model on its batch's rows
# grouped by their bucket, each group in runs of at most RUN_TOKENS tokens (graph_tokenizer/bucketed.py), beside
# MODEL_FILE: a batch of 64 long rows costs a third more a row than runs of 16 (docs/reliability.md).
RUNS_MODEL_FILE = "model_runs.onnx"
TEXTS_GRAPH_FILE = "texts.onnx"
TOKENIZER_GRAPH_FILE = "tokenizer.onnx"
GRAPH_LIBRARY_FILE = "libortextensions.so"
# A first step that checks texts cannot warm up on Triton's empty string (a blank text, which it refuses): it warms
# up on this file of its folder's warmup/ (one BYTES element: its length, 4 bytes little-endian, then the text).
WARMUP_DIR, WARMUP_TEXT_FILE = "warmup", "one_text"
WARMUP_TEXT = "Triton serves raw strings."


def checked_text(name: str) -> str:
    """The ensemble's name for a text input once the first step has checked it (TEXT -> TEXT_CHECKED)."""
    return f"{name}_CHECKED"


TOKENIZER_LAYOUTS: tuple[str, ...] = ("graph", "python")  # --tokenizer: graphs where exact (the default), or a Python step
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.txt"
MANIFEST_FILE = "tritonize.yaml"
# A capability a manifest records (Pipeline.capabilities): the ensemble cuts a request's texts at their start or
# into windows where the request's parameters ask (serving/batching.py names them).
REQUEST_CUTS = "request_cuts"
# tritonize.yaml and verification.json of a repository of several models: each model's entry under this key
# (a repository of one model holds its entry alone, as before several models were served together).
MODELS_KEY = "models"
VERIFICATION_FILE = "verification.json"
# Per version of an embedder's model step, beside its verification report: the ranges int8/uint8 embeddings are
# quantized with (tasks/embedding/quantization.py).
QUANTIZATION_FILE = "quantization.json"
# Per version of a model step, beside its report: the manifest entry that version was generated from, so a rollout
# can tell a re-export of the same model (another precision or runtime) from a new model.
VERSION_MANIFEST_FILE = "version.yaml"
# At the top of a repository: the canary or shadow rollouts in progress (tritonize/rollout_state.py), read by the API.
ROLLOUT_FILE = "rollout.json"
CANDIDATE_SUFFIX = "_candidate"  # the ensemble pinned to a rollout's candidate version, beside the model's own
README_FILE = "README.md"
SERVED_ENTRY = "model.py"  # what the Python backend imports in a step's version folder
STATISTICS_MODULE = "statistics_step"  # the production ensemble's step after a graph no Python follows
# One instance: its queue has no bound, so one instance does not stall (docs/benchmark.md), and it counts in
# microseconds.
STATISTICS_INSTANCES = 1

TENSORRT_CACHE = "/tmp/tritonize_trt_cache"


@dataclass(frozen=True)
class StepRole:
    """A kind of step an ensemble may have (`Pipeline.roles` says which a shape has): its key in code, in
    `step_names` and in the bench's documents, and the suffix of its Triton model's name."""

    key: str
    suffix: str


# The step that reads the request's texts: it tokenizes them, or calls the model step itself (an orchestrating
# first step, question answering). Its folder keeps the suffix every repository was written with.
FIRST = StepRole("first", "_tokenizer")
MODEL = StepRole("model", "_model")  # the graph
POST = StepRole("post", "_post")  # after the graph: turns its outputs into the answer
STATISTICS = StepRole("statistics", "_statistics")  # after a graph no Python follows, only to count its answers
ENSEMBLE = "ensemble"  # the model users call, named as the model itself
# Every role a step may have, in the ensemble's order.
ROLES: tuple[StepRole, ...] = (FIRST, MODEL, POST, STATISTICS)


def step_names(name: str) -> dict[str, str]:
    """The Triton models of a repository named `name`, by role key: the ensemble first, then every role's step,
    whether or not the model has it."""
    return {ENSEMBLE: name, **{role.key: f"{name}{role.suffix}" for role in ROLES}}


def graph_tensor(name: str) -> str:
    """The ensemble's name for a graph output that a statistics step hands on under the output's own name."""
    return f"{name}__graph"


def repo_paths(output: str | Path, name: str) -> dict[str, Path]:
    """Where each model lives inside a repository (one place for the layout)."""
    root = Path(output)
    return {"root": root, **{step: root / model for step, model in step_names(name).items()}}
