"""vLLM's classification API (/classify): every label's score per text, and the label of the highest."""

from __future__ import annotations

import time
import uuid

import numpy as np
from fastapi import APIRouter, Request

from .. import schemas as s
from ..state import state_of
from .common import CLASSIFICATION, INFERS, answered, documented, run, texts_of, tokens

router = APIRouter(tags=["vLLM"])


@router.post("/classify", responses=documented(s.OpenAIError, INFERS))
@answered
async def classify(body: s.ClassifyRequest, request: Request) -> s.ClassifyResponse:
    """`probs` are the head's probabilities (its softmax, or a sigmoid per label for a multi-label head), or with
    `use_activation: false` its logits, both as the graph returns them."""
    state = state_of(request)
    model = state.catalog.find(CLASSIFICATION, body.model)
    texts = texts_of(body.input, "input", state.settings.max_client_batch_size)
    answer = await run(state, request, model, [(t,) for t in texts])
    labels = model.head.labels
    rows = CLASSIFICATION.scores(answer, raw=body.use_activation is False)
    used = tokens(answer)
    return s.ClassifyResponse.model_construct(
        id=f"classify-{uuid.uuid4().hex}", created=int(time.time()), model=model.name,
        data=[s.ClassificationData.model_construct(index=i, label=labels[int(np.argmax(row))], probs=row,
                                                   num_classes=len(labels))
              for i, row in enumerate(rows)],
        usage=s.Usage.model_construct(prompt_tokens=used, total_tokens=used))
