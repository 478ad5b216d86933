"""Reading image-and-text embeddings: IMAGE (encoded files) or TEXT in, one vector per row under `embedding`,
images and texts in one space."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ...errors import TritonizeError
from ...spec import IMAGE_INPUT, TEXT_INPUT, TensorSpec
from ...spec import Head as BaseHead
from ..contract import OneVectorPerRow, TaskContract

OUTPUT = "embedding"
Library = Literal["sentence-transformers", "transformers"]


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "image-text"
    family: str  # the transformers model type: clip, siglip
    dim: int  # the projection's width, shared by both towers
    library: Library  # whose encode the towers are held to
    normalize: bool = False  # whether the library's encode normalises (transformers' get_*_features do not)
    image_size: tuple[int, int] = (224, 224)  # the pixels the vision tower reads (height, width)
    # Texts padded to the max length, with no attention mask, as the model was trained (SigLIP's processor pads
    # to "max_length"); False: padded to the longest text, masked (CLIP).
    pad_to_max: bool = False
    # What the embeddings routes ask of an embedder's head: no declared prompts, no Matryoshka sizes.
    prompts: ClassVar[tuple[tuple[str, str], ...]] = ()
    dimensions: ClassVar[tuple[int, ...]] = ()

    def prompt_for(self, input_type: str) -> str:
        """"": the towers read a text as it is, whatever its input type."""
        return ""

    def truncate(self, vectors: np.ndarray, dim: int) -> np.ndarray:
        """Refused: the towers were not trained for a shorter vector."""
        raise TritonizeError(f"this model serves {self.dim}-value embeddings and cannot be cut to {dim} values "
                             "(it declares no Matryoshka sizes)")


class ImageTextContract(OneVectorPerRow, TaskContract):
    rollout = "shadow"  # two versions' vectors live in two spaces
    head_type = Head
    output_names = (OUTPUT,)
    # Either input, per request: the ensemble's inputs are optional, and the first step refuses both or neither.
    text_inputs = (TensorSpec(IMAGE_INPUT, "TYPE_STRING", (1,), optional=True),
                   TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,), optional=True))
    image_input = IMAGE_INPUT

    @property
    def statistics(self) -> dict[str, str]:
        """None: an image row has no tokens to count, and its first step counts nothing."""
        return {}

    def request(self, rows):
        """Rows of texts: the TEXT input alone (an image request sends IMAGE, `image_request`)."""
        return {TEXT_INPUT: [row[-1] for row in rows]}

    def row_for(self, text: str) -> tuple[str, ...]:
        return (text,)

    def sample_body(self, text: str = "Triton serves raw strings.") -> str:
        from ..contract import sample_body

        return sample_body(self.text_inputs[1:], [text])


CONTRACT = ImageTextContract()
