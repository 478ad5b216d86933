import numpy as np

from tritonize.spec import TensorSpec, TokenizeModelPost
from tritonize.tasks.embedding.contract import OUTPUT as EMBEDDING
from tritonize.tasks.embedding.task import TASK as EMBEDDING_TASK
from tritonize.tasks.embedding.task import Embedding

from .contract import CONTRACT, OUTPUT


class Shout(Embedding):
    """Served only where asked (--task shout), on the folders the embedding task accepts."""

    contract = CONTRACT
    summary = "TEXT in, `shout` (FP32 [N, dim]) out: each text's embedding, doubled"
    serves = "the folders the embedding task serves, where --task shout asks"
    pipeline = TokenizeModelPost("shout", reads_text=False)

    def detect(self, folder):
        return False

    def accepts(self, folder):
        return EMBEDDING_TASK.accepts(folder)

    def outputs(self, head):
        return (TensorSpec(OUTPUT, "TYPE_FP32", (head.dim,)),)

    def graph_outputs(self, head):
        return Embedding.outputs(self, head)

    def post_parameters(self, spec):
        return {"input": EMBEDDING}

    def served_check(self, spec, graph, rows, graph_out):
        """The post step's answer against twice the library's own embedding."""
        from tritonize.serving.shout import PostStep

        source, reference = self.reference(spec, graph, rows)
        served = PostStep(EMBEDDING)({EMBEDDING: graph_out[0]})[OUTPUT]
        worst = float(np.abs(served - 2 * reference).max())
        agree = int((np.abs(served - 2 * reference).max(axis=1) <= 1e-4).sum())
        return {"reference": f"twice {source}", "rows": len(rows), "agree": agree, "passed": agree == len(rows),
                "max_abs": worst}


TASK = Shout()
