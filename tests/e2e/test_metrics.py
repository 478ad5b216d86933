"""The served steps' counters on Triton's metrics port, against what the same steps count in-process."""

from __future__ import annotations

import pytest

from support.metrics import scrape
from support.stopping import serving
from tritonize import chain, metrics_text
from tritonize.client import ServerError, TextClient
from tritonize.runtime.local import LocalRuntime
from tritonize.serving.metrics import COUNTED


def test_the_tokenizer_step_counts_what_it_tokenized_and_refused(tiny_python_repo, local_options, tmp_path) -> None:
    texts = ["hello world", "Ünïcödé café 🚀 ☃", "many words in a row " * 40]  # the last is truncated at 64 tokens
    name = tiny_python_repo.name
    step = f"{name}_tokenizer"
    with serving(LocalRuntime(local_options(tiny_python_repo.repository, tmp_path / "run"), quiet=True)) as endpoints:
        with TextClient(endpoints.grpc, name) as client:
            for text in texts:
                client.embed([text])
            for bad in ([""], [b"\xff bad"], [""]):
                with pytest.raises(ServerError):
                    client.embed(bad)
        metrics = scrape(endpoints.metrics)
    counts: dict = {}
    encoder = chain.text_encoder(tiny_python_repo.repository)
    for text in texts:  # one request each, as sent
        encoder.encode_many([[text]], counts=counts)
    assert counts["truncated"] == 1 and counts["unknown"] > 0  # the case is exercised
    for key, value in counts.items():
        assert metrics_text.value(metrics, COUNTED[key], model=step) == value, key
    assert metrics_text.value(metrics, "tritonize_inputs_rejected_total", model=step, reason="empty") == 2
    assert metrics_text.value(metrics, "tritonize_inputs_rejected_total", model=step, reason="invalid_utf8") == 1
    assert metrics_text.value(metrics, "tritonize_inputs_rejected_total", model=step, reason="too_large") == 0
    # The local one step's graph ran each request on its own (they were sent one at a time); none was refused.
    assert metrics_text.value(metrics, "tritonize_graph_runs_total", model=step) == 3
    assert metrics_text.value(metrics, "tritonize_graph_texts_total", model=step) == 3
    assert metrics_text.value(metrics, "tritonize_queue_full_total", model=step) == 0
