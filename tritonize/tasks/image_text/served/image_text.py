"""The image-and-text first step: a request of images (IMAGE, encoded files) or of texts (TEXT) -> the inputs of
the two-tower graph.

Served: Triton runs a byte-identical copy of this file as the step's model.py, beside tokenizer.py, images.py and
what they import. The graph holds both towers behind one ONNX `If` on the pixels' height
(tasks/image_text/task.py): a text row carries pixels of 1x1 (never read: the text branch runs), an image row
one padding token (never read: the vision branch runs). So rows of one kind batch together, rows of the two
kinds never share a batch (their shapes differ), and neither tower runs for the other's rows.

A request sends one of the two inputs: both, or neither, is its error. Each bad image is its request's error
(images.py, beside it), and the step goes on serving.
"""

from __future__ import annotations

import numpy as np

from .batching import ATTENTION_MASK, INPUT_IDS, TOKEN_COUNT, TRUNCATED
from .images import MAX_PIXELS, MAX_PIXELS_PARAMETER, PARAMETER, PIXEL_VALUES, Preprocess, decode_image
from .stub import ServedStep
from .texts import InvalidText
from .tokenizer import TextEncoder, error_response, parameters

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests, verification and the benchmark's floor use ImageTextEncoder
    pb_utils = None

IMAGE, TEXT = "IMAGE", "TEXT"  # the step's inputs (spec/names.py's IMAGE_INPUT and TEXT_INPUT)
TEXT_PIXELS = (3, 1, 1)
PAD_TO_MAX = "pad_to_max"  # texts padded to the max length and read whole, unmasked (SigLIP, as trained)  # a text row's pixels: the graph's text branch runs, and never reads them


class ImageTextEncoder:
    """Texts through the served tokenizer, images through `Preprocess`, each into every input the graph takes."""

    def __init__(self, text: TextEncoder, preprocess: Preprocess, max_pixels: int, outputs: tuple[str, ...],
                 pad_to_max: bool = False):
        self.text, self.preprocess, self.max_pixels, self.outputs = text, preprocess, max_pixels, outputs
        self.pad_to_max = pad_to_max
        self.max_length = text.max_length

    @classmethod
    def from_config(cls, model_config: dict, version_dir: str) -> ImageTextEncoder:
        outputs = tuple(o["name"] for o in model_config["output"])
        p = parameters(model_config)
        text = TextEncoder.from_config(model_config, version_dir, tuple(n for n in outputs if n != PIXEL_VALUES))
        text.names = (TEXT,)
        return cls(text, Preprocess.from_json(p[PARAMETER]), int(p.get(MAX_PIXELS_PARAMETER, MAX_PIXELS)), outputs,
                   p.get(PAD_TO_MAX) == "1")

    def encode(self, texts: list, width: int | None = None) -> dict[str, np.ndarray]:
        """One request's texts -> the graph's inputs (pixels of 1x1) and the rows' tokens."""
        tensors = self.text.encode(texts, self.max_length if self.pad_to_max else width)
        if self.pad_to_max:  # every position is read, as the model was trained
            tensors[ATTENTION_MASK] = np.ones_like(tensors[ATTENTION_MASK])
        tensors[PIXEL_VALUES] = np.zeros((len(texts),) + TEXT_PIXELS, dtype=np.float32)
        return {n: tensors[n] for n in self.outputs}

    def pixels(self, images: list[bytes], name: str = IMAGE) -> np.ndarray:
        """Encoded files -> [N, 3, H, W] pixels, as the folder's image processor prepares them."""
        return np.stack([self.preprocess(decode_image(data, f"{name}[{i}]", self.max_pixels))
                         for i, data in enumerate(images)])

    def encode_images(self, images: list[bytes]) -> dict[str, np.ndarray]:
        """One request's images -> the graph's inputs (one padding token each) and the rows' tokens (none)."""
        n = len(images)
        if not n:
            raise InvalidText(f"{IMAGE} has no elements", "no_elements")
        tensors = {
            PIXEL_VALUES: self.pixels(images),
            INPUT_IDS: np.full((n, 1), self.text.pad_id, dtype=np.int64),
            ATTENTION_MASK: np.ones((n, 1), dtype=np.int64),
            TOKEN_COUNT: np.zeros((n, 1), dtype=np.int32),
            TRUNCATED: np.zeros((n, 1), dtype=bool),
        }
        return {k: tensors[k] for k in self.outputs}

    def request(self, images: np.ndarray | None, texts: np.ndarray | None) -> dict[str, np.ndarray]:
        """One request's inputs (either may be absent) -> its tensors, or its one-line error."""
        if (images is None) == (texts is None):
            given = "both" if images is not None else "neither"
            raise InvalidText(f"send {IMAGE} (encoded image files) or {TEXT} (texts) in a request, not {given}",
                              "inputs")
        if images is not None:
            return self.encode_images([bytes(x) if not isinstance(x, str) else x.encode() for x in images.reshape(-1)])
        return self.encode(self.text.rows({TEXT: texts}, [TEXT]))


class TritonPythonModel(ServedStep):
    """Each request's images or texts -> the graph's inputs; a bad request gets its own error."""

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        self.encoder = ImageTextEncoder.from_config(config, version_dir)

    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = {}
            for name in (IMAGE, TEXT):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                inputs[name] = tensor.as_numpy() if tensor is not None else None
            try:
                tensors = self.encoder.request(inputs[IMAGE], inputs[TEXT])
            except InvalidText as exc:
                responses.append(error_response(str(exc)))
                continue
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, arr) for name, arr in tensors.items()]))
        return responses
