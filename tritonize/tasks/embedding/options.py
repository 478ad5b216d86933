"""The `tritonize generate` options only an embedder reads: data, so that the registry gathers them (and
GenerateOptions, which a served repository's manifest is read into) without importing what builds."""

from __future__ import annotations

from ...spec import TaskOption, int_list

POOLINGS: tuple[str, ...] = ("mean", "cls")  # what --pooling can ask for

OPTIONS: tuple[TaskOption, ...] = (
        TaskOption("pooling", "str | None", "embedding pooling (default: what the folder declares, else mean)",
                   choices=POOLINGS),
        TaskOption("normalize", "bool | None", "L2-normalise embeddings", switch=True),
        # The Matryoshka sizes a request may cut vectors to (None: what the model card declares, if any).
        TaskOption("matryoshka_dims", "list[int] | None", "embedding: sizes a request may cut vectors to, e.g. "
                   "768,512,256,128, each verified against sentence-transformers' encode(truncate_dim=...) "
                   "(default: what the model card declares, else none)", parse=int_list),
        # A file of texts whose embeddings' per-dimension ranges int8/uint8 quantize with (None: the verification
        # corpus's).
        TaskOption("calibration", "str | None", "embedding: a text file, one text per line, whose embeddings' "
                   "per-dimension ranges the API quantizes int8/uint8 embeddings with (default: the verification "
                   "corpus)"),
)
