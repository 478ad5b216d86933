"""The prometheus-adapter rule `tritonize k8s render` writes, against a live local Triton: the series it reads
exist there, and its matchers select this repository's steps.
"""

from __future__ import annotations

import re

from support.stopping import serving
from tritonize import k8s, metrics_text
from tritonize.spec import step_names


def test_adapter_rule_finds_its_series_on_a_live_server(tiny_python_repo, local_options, tmp_path) -> None:
    """The series and labels the rule reads exist on a real Triton, and its matchers pick the right models."""
    from tritonize.client import TextClient
    from tritonize.runtime.local import LocalRuntime

    rule = k8s.queue_rule()
    series_name = rule["seriesQuery"].split("{")[0]
    steps_re, first_re = re.findall(r'model=~"([^"]+)"', rule["metricsQuery"])
    name = tiny_python_repo.name
    with serving(LocalRuntime(local_options(tiny_python_repo.repository, tmp_path / "run"), quiet=True)) as endpoints:
        with TextClient(endpoints.grpc, name) as client:
            for _ in range(5):
                client.embed(["hello world"])
        page = metrics_text.fetch(endpoints.metrics)
    found: dict[str, dict[str, float]] = {}
    for s in metrics_text.samples(page):
        if "model" in s.labels:
            found.setdefault(s.name, {})[s.labels["model"]] = s.value
    queued = {m: v for m, v in found[series_name].items() if re.fullmatch(steps_re, m)}
    served = {m: v for m, v in found["nv_inference_request_success"].items() if re.fullmatch(first_re, m)}
    names = step_names(name)
    assert set(queued) == {names["first"], names["model"]}  # the tiny embedder has no post step
    assert names["ensemble"] in found[series_name]  # there, and left out
    # In the pod the tokenizer step is the first and counts every request; the local server's model step tokenizes
    # itself, so there the tokenizer step idles (its series still there, at 0) and the model step counts them.
    assert served == {names["first"]: 0.0}
    assert found["nv_inference_request_success"][names["model"]] == 5.0
    # The series is the steps' queue time: nothing where nothing was served, some where the five requests waited
    # to be batched, and never more than that step's whole time on them.
    assert queued[names["first"]] == 0
    assert 0 < queued[names["model"]] <= found["nv_inference_request_duration_us"][names["model"]]
