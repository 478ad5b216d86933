"""The bench's images workload without a server: the files it sends, the requests they become, and its refusals."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tritonize.bench import corpus, stand_in
from tritonize.bench.options import BenchOptions
from tritonize.errors import TritonizeError
from tritonize.serving.images import decode_image
from tritonize.tasks.embedding import CONTRACT as EMBEDDING
from tritonize.tasks.image_text import CONTRACT as IMAGE_TEXT


def test_images_are_different_jpegs_the_image_step_decodes_and_go_as_the_image_input() -> None:
    w = corpus.image_workload(IMAGE_TEXT, n=6)
    files = [row[0] for row in w.rows]
    assert w.images and len(set(files)) == 6 and all(len(row) == 1 for row in w.rows)  # no two requests alike
    for i, data in enumerate(files):
        opened = Image.open(io.BytesIO(data))
        assert (opened.format, opened.size) == ("JPEG", (corpus.IMAGE_SIDE, corpus.IMAGE_SIDE))
        assert decode_image(data, f"IMAGE[{i}]").mode == "RGB"  # as the served first step reads it
    summary = w.summary()
    assert summary["rows"] == 6 and "tokens" not in summary and summary["bytes"]["min"] > 1000
    request = corpus.request_of(IMAGE_TEXT, w)
    assert request(w.rows[:2]) == {"IMAGE": files[:2]}
    # The same model's texts go as TEXT alone: IMAGE is optional, and a request sends one of the two.
    texts = corpus.Workload("short", [("a cat",), ("a dog",)], [3, 3])
    assert corpus.request_of(IMAGE_TEXT, texts)(texts.rows) == {"TEXT": ["a cat", "a dog"]}
    assert corpus.request_of(EMBEDDING, texts)(texts.rows) == {"TEXT": ["a cat", "a dog"]}


def test_images_are_refused_in_one_line_where_the_model_takes_none() -> None:
    with pytest.raises(TritonizeError, match="the images workload sends images; this embedding model takes texts "
                                             r"alone \(TEXT\)") as caught:
        corpus.image_workload(EMBEDDING, n=1)
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="takes no images"):
        EMBEDDING.image_request([b"\xff\xd8"])
    with pytest.raises(TritonizeError, match="--stand-in measures texts"):
        stand_in.check_options(BenchOptions(repository=".", workloads=["short", "images"], peers=[],
                                            variant="production"))
