"""What a task is: the one place everything task-specific is asked for.

A task module (embedding.py, classification.py, ...) holds detection from a
model folder, the head it reads, the graph it exports (the model's own class,
wrapped so that the graph returns the served outputs), the ensemble's
outputs, the verification reference and how clients decode the answer.
`generate`, `verify`, the repository writer and the clients ask the task;
they never branch on its name.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..spec import TEXT_INPUT, GenerateOptions, Head, ModelSpec, TensorSpec

if TYPE_CHECKING:
    from ..source import ModelFolder

SAMPLE_TEXT = "Triton serves raw strings."
FLOAT = "TYPE_FP32"  # fp16 graphs keep fp32 inputs and outputs (keep_io_types), so clients never see fp16


class Task(abc.ABC):
    name: ClassVar[str]
    summary: ClassVar[str]  # one line: what goes in, what comes out
    head_type: ClassVar[type[Head]]
    output_names: ClassVar[tuple[str, ...]]  # what the ensemble returns, in graph order
    text_inputs: ClassVar[tuple[TensorSpec, ...]] = (TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,)),)
    # Verification also demands the same argmax as the reference on every sentence.
    same_argmax: ClassVar[bool] = False

    # -- model folder -> head ------------------------------------------------
    @abc.abstractmethod
    def detect(self, folder: ModelFolder) -> bool:
        """True when the folder's own head is this task's, so it is chosen without --task."""

    @abc.abstractmethod
    def read_head(self, folder: ModelFolder, options: GenerateOptions) -> Head:
        """The head as the folder declares it, with the user's overrides; refuse what cannot be served."""

    def head_from_dict(self, data: dict) -> Head:
        """The head back from a repository manifest."""
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return self.head_type(**values)

    @abc.abstractmethod
    def describe(self, head: Head) -> str:
        """A few words for progress output and the repository README."""

    def labels(self, head: Head) -> tuple[str, ...]:
        """Class names, index order, for Triton's classification extension (none by default)."""
        return ()

    # -- graph and ensemble ---------------------------------------------------
    @abc.abstractmethod
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:
        """What the exported graph, and so the ensemble, returns (in graph order)."""

    @abc.abstractmethod
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        """The model with its own transformers class, wrapped to return `outputs` (a torch.nn.Module).

        eager=True forces eager attention, which exports to plain MatMul/Softmax
        that onnxruntime's optimizer can fuse.
        """

    # -- verification ---------------------------------------------------------
    def reference(self, spec: ModelSpec, graph: Any, texts: list[str], feeds: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
        """(what was used, the first output) on `texts`: by default the wrapped PyTorch model."""
        import torch

        with torch.no_grad():
            out = graph(*(torch.from_numpy(feeds[n]) for n in spec.input_names))
        first = out[0] if isinstance(out, tuple) else out
        return "pytorch", first.numpy()

    # -- clients --------------------------------------------------------------
    def sample_body(self, text: str = SAMPLE_TEXT) -> str:
        """A KServe v2 JSON request with one row, for curl examples."""
        return sample_body(self.text_inputs, text)

    def client_request(self, top_k: int) -> tuple[list[str] | None, int]:
        """(outputs to ask for, or None for all; Triton classification count per output)."""
        return None, 0

    @abc.abstractmethod
    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        """One JSON-able answer per text, from the arrays a request returned."""

    @abc.abstractmethod
    def summary_line(self, row: dict) -> str:
        """One row in a few words, for the client scripts."""


def sample_body(text_inputs: tuple[TensorSpec, ...], text: str = SAMPLE_TEXT) -> str:
    """A KServe v2 JSON request: the same text in every input, one row."""
    import json

    return json.dumps({"inputs": [{"name": t.name, "shape": [1, 1], "datatype": "BYTES", "data": [text]} for t in text_inputs]})


def load_pretrained(auto_class: Any, spec: ModelSpec, eager: bool) -> Any:
    """The folder's weights in `auto_class`, in eval mode; one error line when transformers refuses."""
    from ..errors import TritonizeError

    kwargs = {"attn_implementation": "eager"} if eager else {}
    try:
        model = auto_class.from_pretrained(spec.source, trust_remote_code=spec.trust_remote_code, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise TritonizeError(f"transformers could not load {spec.source}: {exc}") from exc
    return model.eval()
