import dataclasses

import numpy as np

from tritonize.spec import TensorSpec, TokenizeModelPost
from tritonize.tasks.embedding.contract import OUTPUT as EMBEDDING
from tritonize.tasks.embedding.options import OPTIONS as EMBEDDING_OPTIONS
from tritonize.tasks.embedding.task import TASK as EMBEDDING_TASK
from tritonize.tasks.embedding.task import Embedding, EmbeddingDetector, EmbeddingEnsemble, EmbeddingVerifier

from .contract import CONTRACT, OUTPUT
from .options import OPTIONS


class ShoutDetector(EmbeddingDetector):
    """Served only where asked (--task shout), on the folders the embedding task accepts."""

    def detect(self, folder):
        return False

    def accepts(self, folder):
        return EMBEDDING_TASK.detector.accepts(folder)

    def read_head(self, folder, options):
        """--loudness is a field of the options where the package was installed before they were built (its
        entry point); registered later, no flag of it can have been given."""
        head = super().read_head(folder, options)
        return dataclasses.replace(head, loudness=getattr(options, "loudness", None) or head.loudness)

    def describe(self, head):
        return f"{super().describe(head)}, taken {head.loudness} times"


class ShoutEnsemble(EmbeddingEnsemble):
    def outputs(self, head):
        return (TensorSpec(OUTPUT, "TYPE_FP32", (head.dim,)),)

    def graph_outputs(self, head):
        return super().outputs(head)

    def post_parameters(self, spec):
        return {"input": EMBEDDING, "loudness": str(spec.head.loudness)}


class ShoutVerifier(EmbeddingVerifier):
    def served_check(self, spec, graph, rows, graph_out):
        """The post step's answer against the library's own embedding, taken `loudness` times."""
        from tritonize.serving.shout import PostStep

        source, reference = self.reference(spec, graph, rows)
        loudness = spec.head.loudness
        served = PostStep(EMBEDDING, loudness)({EMBEDDING: graph_out[0]})[OUTPUT]
        worst = float(np.abs(served - loudness * reference).max())
        agree = int((np.abs(served - loudness * reference).max(axis=1) <= 1e-4).sum())
        return {"reference": f"{source}, {loudness} times", "rows": len(rows), "agree": agree, "passed": agree == len(rows),
                "max_abs": worst}


class Shout(Embedding):
    contract = CONTRACT
    summary = "TEXT in, `shout` (FP32 [N, dim]) out: each text's embedding, taken --loudness times"
    serves = "the folders the embedding task serves, where --task shout asks"
    pipeline = TokenizeModelPost("shout", reads_text=False)
    own_options = EMBEDDING_OPTIONS + OPTIONS
    Detector = ShoutDetector
    Ensemble = ShoutEnsemble
    Verifier = ShoutVerifier


TASK = Shout()
