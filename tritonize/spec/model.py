"""What the source model is (`ModelSpec`), the task's half of it (`Head`), and one tensor as Triton sees it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from .names import TOKEN_COUNT_OUTPUT, TOKEN_INPUTS, TRUNCATED_OUTPUT


@dataclass(frozen=True)
class TensorSpec:
    """One tensor as Triton sees it (dims exclude the batch dimension)."""

    name: str
    triton_type: str  # e.g. TYPE_INT64, TYPE_FP32, TYPE_STRING
    dims: tuple[int, ...]
    label_filename: str | None = None
    optional: bool = False  # a request may leave it out (an ensemble taking either of two inputs)

    @property
    def dims_text(self) -> str:
        return "[ " + ", ".join(str(d) for d in self.dims) + " ]"


ROW_OUTPUTS = (TensorSpec(TOKEN_COUNT_OUTPUT, "TYPE_INT32", (1,)), TensorSpec(TRUNCATED_OUTPUT, "TYPE_BOOL", (1,)))


@dataclass(frozen=True)
class Head:
    """The task-specific half of a ModelSpec; each task module defines one.

    A classifier's head has labels and no pooling, an embedder's has pooling
    and no labels: combinations that make no sense cannot be written down.
    """

    task: ClassVar[str]


@dataclass(frozen=True)
class ModelSpec:
    """What the source model is: decided once by `source.read_model`."""

    source: str  # the transformers folder the weights are read from
    head: Head
    max_length: int
    architecture: str
    model_type: str
    tokenizer_file: str  # absolute path to a tokenizer.json (transformers' own view of the tokenizer)
    pad_token_id: int = 0
    input_names: tuple[str, ...] = TOKEN_INPUTS  # ONNX / Triton inputs of the model step
    sentence_transformers_dir: str | None = None  # the folder with modules.json, when there is one
    trust_remote_code: bool = False

    @property
    def task(self) -> str:
        return self.head.task


# The model step's instances where --model-instances is not given: two in the production configs (see


def int_list(text: str) -> list[int]:
    """A flag's comma-separated integers (--buckets, --matryoshka-dims)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


@dataclass(frozen=True)
class TaskOption:
    """An option of `tritonize generate` that only one task reads, declared by that task (`Task.own_options`):
    a field of GenerateOptions, None unless given, and its flag. Any other task refuses it when given."""

    field: str
    annotation: str  # the field's type, as GenerateOptions declares it
    help: str
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None  # how the flag's text becomes the value
    switch: bool = False  # --flag / --no-flag
    # The common field it follows in GenerateOptions, so in tritonize.yaml and --help (repositories written
    # before keep their keys' order).
    after: str = "max_length"

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


class Options(Protocol):
    """What a task reads of generate's options (GenerateOptions, which stands above the tasks because it gathers
    their own options): the common fields it names, and its own options by field name."""

    max_length: int | None
    trust_remote_code: bool
    task_options: ClassVar[tuple[TaskOption, ...]]

    def __getattr__(self, name: str) -> Any: ...
