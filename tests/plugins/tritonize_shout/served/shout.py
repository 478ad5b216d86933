"""Shout's post step: each text's embedding, taken `loudness` times. Served: copied verbatim beside the shared post_step.py."""

from __future__ import annotations

import numpy as np

from .post_step import PostAdapter

OUTPUT = "shout"


class PostStep:
    """The graph's embeddings of a request -> its answer; the input's name comes from the configuration."""

    def __init__(self, input_name: str, loudness: int):
        self.input_name, self.loudness = input_name, loudness

    @classmethod
    def from_config(cls, model_config: dict, version_dir: str) -> PostStep:
        p = {k: v["string_value"] for k, v in model_config["parameters"].items()}
        return cls(p["input"], int(p["loudness"]))

    def __call__(self, inputs):
        return {OUTPUT: self.loudness * np.asarray(inputs[self.input_name], dtype=np.float32)}


class TritonPythonModel(PostAdapter):
    def build(self, config: dict, version_dir: str) -> PostStep:
        return PostStep.from_config(config, version_dir)

    def read(self, config: dict) -> list[str]:
        return [self.step.input_name]
