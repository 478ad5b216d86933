"""Which routes serve which task: the API's own table, read by the routes, /info and printed examples.

A task's answers (tritonize/tasks/<task>/answers.py) say what its ensemble takes and returns; the HTTP
shapes in front of it are the API's, here: the routes that serve it, a sample request for `deploy.py local
up` to print, and the `model_type` text-embeddings-inference's /info reports. A new task adds one row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..spec import Head
from ..tasks.answers import SAMPLE_TEXT, Answers
from ..tasks.classification import answers as classification
from ..tasks.embedding import answers as embedding
from ..tasks.multi_vector import answers as multi_vector
from ..tasks.question_answering import answers as question_answering
from ..tasks.rerank import answers as rerank
from ..tasks.sparse_embedding import answers as sparse_embedding
from ..tasks.token_classification import answers as token_classification


@dataclass(frozen=True)
class TaskRoutes:
    answers: Answers
    paths: tuple[str, ...]  # the routes that serve the task; the first is the one examples call
    sample: Callable[[Answers, str, str], dict]  # (answers, model name, text) -> a JSON body for paths[0]
    # text-embeddings-inference's /info `model_type` for a head; None: the task's name, with nothing more to say
    model_type: Callable[[Head], dict] | None = None
    # What the served heads all accept of a request's fields, as JSON Schema (openapi.py writes it into the
    # document); None: nothing beyond the request models' own schema.
    accepts: Callable[[tuple[Head, ...]], dict[str, dict]] | None = None
    # A route that returns documents' vectors alone, and a body for it: (route, (model name, texts) -> body). The
    # rerank benchmark measures it beside the rerank it is part of; None: the task has none apart from its answer.
    document_vectors: tuple[str, Callable[[str, list[str]], dict]] | None = None

    def info_type(self, head: Head) -> dict:
        return self.model_type(head) if self.model_type else {head.task: {}}

    def api_sample(self, name: str, text: str = SAMPLE_TEXT) -> tuple[str, dict]:
        """(route, JSON body) of a request this task's model answers, for printed examples."""
        return self.paths[0], self.sample(self.answers, name, text)


def prompt_names(heads: tuple[Head, ...]) -> dict[str, dict]:
    """The prompt names every served head declares (sentence-transformers' `prompts`)."""
    names = set.intersection(*(set(dict(h.prompts)) for h in heads))
    return {"prompt_name": {"anyOf": [{"type": "string", "enum": ["", *sorted(names)]}, {"type": "null"}],
                            "description": "a prompt the model declares"}}


def embedding_accepts(heads: tuple[Head, ...]) -> dict[str, dict]:
    """The sizes every served embedder cuts to (its own, and the Matryoshka sizes it declares), the prompt
    names all declare, the input types all map to a prompt (or embed as they are), and `normalize: false` only
    where no graph normalises."""
    sizes = set.intersection(*({h.dim, *h.dimensions} for h in heads))
    dimensions = {"anyOf": [{"type": "integer", "enum": sorted(sizes, reverse=True)}, {"type": "null"}],
                  "description": "the served size, or a Matryoshka size the model declares"}
    input_types = [t for t in embedding.INPUT_TYPE_PROMPTS if all(t in h.input_types for h in heads)]
    return {
        "dimensions": dimensions,
        "output_dimension": dimensions,
        "input_type": {"anyOf": [{"type": "string", "enum": input_types}, {"type": "null"}],
                       "description": "selects the prompt the model declares for it (docs/api.md); a model "
                                      "without prompts embeds the text as it is"},
        "normalize": {"type": "boolean", **({"enum": [True]} if any(h.normalize for h in heads) else {}),
                      "description": "false only for a model whose graph does not normalise"},
        **prompt_names(heads),
    }


def rerank_accepts(heads: tuple[Head, ...]) -> dict[str, dict]:
    """`raw_scores` (and vLLM's `use_activation: false`) only where no served graph applies an activation it
    cannot undo exactly."""
    raw = all(h.activation == "identity" for h in heads)
    logits = "logits, for a model whose graph applies no activation"
    return {"raw_scores": {"type": "boolean", **({} if raw else {"enum": [False]}), "description": logits},
            "use_activation": {"anyOf": [{"type": "boolean", **({} if raw else {"enum": [True]})}, {"type": "null"}],
                               "description": f"false: {logits}"}}


def labelled(kind: str, labels: tuple[str, ...]) -> dict:
    return {kind: {"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}}}


TASK_ROUTES = (
    TaskRoutes(embedding.ANSWERS, ("/v1/embeddings", "/v2/embed", "/embed", "/similarity", "/embed_all"),
               lambda a, name, text: {"model": name, "input": [text]},
               lambda head: {"embedding": {"pooling": head.pooling}}, embedding_accepts),
    TaskRoutes(rerank.ANSWERS, ("/v1/rerank", "/v2/rerank", "/rerank", "/v1/ranking", "/score", "/v1/score"),
               lambda a, name, text: {"model": name, "query": a.sample_first, "documents": [text, "A fox."]},
               lambda head: labelled("reranker", ("LABEL_0",)), rerank_accepts),
    TaskRoutes(multi_vector.ANSWERS, ("/v1/rerank", "/v2/rerank", "/rerank", "/v1/ranking", "/score", "/v1/score",
                                      "/embed_all"),
               lambda a, name, text: {"model": name, "query": rerank.ANSWERS.sample_first, "documents": [text, "A fox."]},
               document_vectors=("/embed_all", lambda name, texts: {"model": name, "inputs": texts})),
    TaskRoutes(classification.ANSWERS, ("/predict", "/classify"),
               lambda a, name, text: {"model": name, "inputs": text},
               lambda head: labelled("classifier", head.labels)),
    TaskRoutes(sparse_embedding.ANSWERS, ("/embed_sparse",),
               lambda a, name, text: {"model": name, "inputs": [text]}, accepts=prompt_names),
    TaskRoutes(token_classification.ANSWERS, ("/v1/entities",),
               lambda a, name, text: {"model": name, "inputs": [text]}),
    TaskRoutes(question_answering.ANSWERS, ("/v1/answers",),
               lambda a, name, text: {"model": name, "inputs": {"question": a.sample_first, "context": text}}),
)
BY_TASK: dict[str, TaskRoutes] = {r.answers.name: r for r in TASK_ROUTES}


def routes_of(head: Head) -> TaskRoutes:
    return BY_TASK[head.task]
