"""Typed specs built without a model folder (an embedding `ModelSpec`, a passed `VerificationReport`), for
unit tests of planning and rendering."""

from __future__ import annotations

from tritonize.spec import ModelSpec
from tritonize.tasks import embedding
from tritonize.verify import VerificationReport

EMBEDDING = ModelSpec(
    source="/models/x",
    head=embedding.Head(pooling="mean", normalize=True, dim=384),
    max_length=256,
    architecture="BertModel",
    model_type="bert",
    tokenizer_file="/models/x/tokenizer.json",
)


PASSED = VerificationReport(reference="pytorch", task="embedding", passed=True)
