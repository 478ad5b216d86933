from dataclasses import dataclass
from typing import ClassVar

from tritonize.tasks.embedding.contract import EmbeddingContract
from tritonize.tasks.embedding.contract import Head as EmbeddingHead

OUTPUT = "shout"


@dataclass(frozen=True)
class Head(EmbeddingHead):
    task: ClassVar[str] = "shout"
    loudness: int = 2  # how many times each embedding is taken


class ShoutContract(EmbeddingContract):
    head_type = Head
    output_names = (OUTPUT,)
    output_statistics = {"tritonize_output_shout_norm": OUTPUT}
    statistics_module = "shout_statistics"

    def vectors(self, outputs):
        return outputs[OUTPUT]


CONTRACT = ShoutContract()
