"""The model step's warm-up for real on the CPU production path: a tiny repository served on the production
variant (Triton's native onnxruntime backend) runs each warm-up sample on each instance of the model step before
the model loads, and then answers.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from support.specs import PASSED
from support.stopping import serving
from tritonize import repository

# --------------------------------------------------------------------------- served for real


WARMUP_LINE = re.compile(  # Triton's verbose log, one line per sample, instance and iteration
    r"model '(?P<model>[^']+)' instance (?P<instance>\S+) is running warmup sample '(?P<sample>[^']+)'")


@pytest.mark.usefixtures("native_backend")
def test_production_variant_warms_every_bucket_before_ready(tiny_python_repo, local_options, tmp_path) -> None:
    """The native onnxruntime backend runs each sample on each instance before Triton marks the model loaded,
    as its log (verbose) and the model step's statistics show before any request; then the server answers."""
    from tritonclient.http import InferenceServerClient

    from tritonize.client import TextClient
    from tritonize.runtime.local import LocalRuntime

    repo = tiny_python_repo.repository
    model = f"{tiny_python_repo.name}_model"
    config = repository.parse_config((repo / model / "config.pbtxt").read_text())
    instances = config.instance_group[0].count
    samples = [w.name for w in config.model_warmup]
    tokenizer = repository.parse_config((repo / f"{tiny_python_repo.name}_tokenizer" / "config.pbtxt").read_text())
    assert samples == [f"bucket_{b}" for b in tokenizer.parameters["buckets"].string_value.split(",")]  # a row each
    assert instances >= 1

    runtime = LocalRuntime(local_options(repo, tmp_path / "run", log_verbose=1), quiet=True, variant="production")
    with serving(runtime) as endpoints:
        stats = InferenceServerClient(f"{endpoints.host}:{endpoints.http_port}").get_inference_statistics(model)
        (before,) = stats["model_stats"]
        with TextClient(endpoints.grpc, tiny_python_repo.name) as client:
            vectors = client.embed(["hello world", "the quick brown fox " * 10])
        log = runtime.log_file.read_text(errors="replace").splitlines()

    # Ready only after the warm-up: every sample ran on every instance before the model step loaded.
    loaded = next(i for i, line in enumerate(log) if f"successfully loaded '{model}'" in line)
    ran = [(i, m) for i, line in enumerate(log) if (m := WARMUP_LINE.search(line)) and m["model"] == model]
    per_instance: dict[str, list[str]] = {}
    for _, m in ran:
        per_instance.setdefault(m["instance"], []).append(m["sample"])
    assert len(per_instance) == instances and all(names == samples for names in per_instance.values())
    assert all(i < loaded for i, _ in ran)
    # The statistics say the same before any request: one execution of one row per sample and instance.
    assert before["execution_count"] == before["inference_count"] == instances * len(samples)
    batches = [(b["batch_size"], b["compute_infer"]["count"]) for b in before["batch_stats"]]
    assert batches == [(1, instances * len(samples))]
    assert before["inference_stats"]["fail"]["count"] == 0
    # And then it answers: a vector per text, as wide as the ensemble says.
    ensemble = repository.parse_config((repo / tiny_python_repo.name / "config.pbtxt").read_text())
    assert vectors.shape == (2, ensemble.output[0].dims[0])


@pytest.mark.usefixtures("native_backend")
def test_gpu_config_loads_and_warms_a_full_batch_on_the_cpu_backend(tiny_python_repo, local_options,
                                                                      tmp_path) -> None:
    """The GPU + TensorRT model step's config, its instance kind set to CPU (the one change): Triton accepts it,
    TensorRT block included (the backend reads that block on GPU instances only), and runs the full-batch sample
    as one batch of max_batch_size rows on each instance before the model loads."""
    import shutil

    from tritonclient.http import InferenceServerClient

    from tritonize.manifest import read_manifest
    from tritonize.runtime.local import LocalRuntime

    repo = shutil.copytree(tiny_python_repo.repository, tmp_path / "repo")
    current = read_manifest(repo)
    options = dataclasses.replace(current.options, device="gpu", tensorrt=True, precision="fp16")
    spec = repository.plan(options, current.model, current.name)
    model = spec.model_name
    (text,) = [f.text for f in repository.render(spec, repository.manifest(options, spec), PASSED)
               if f.path == f"{model}/config.pbtxt"]
    assert text.count("KIND_GPU") == 1 and "trt_profile_max_shapes" in text
    (repo / model / "config.pbtxt").write_text(text.replace("KIND_GPU", "KIND_CPU"))

    with serving(LocalRuntime(local_options(repo, tmp_path / "run"), quiet=True, variant="production")) as endpoints:
        stats = InferenceServerClient(f"{endpoints.host}:{endpoints.http_port}").get_inference_statistics(model)
    (before,) = stats["model_stats"]
    instances, rows = spec.model_step.instance_count, spec.model_step.max_batch_size
    one_row = len(spec.buckets)
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in before["batch_stats"]} == {1: instances * one_row,
                                                                                            rows: instances}
    assert before["inference_count"] == instances * (one_row + rows) and before["inference_stats"]["fail"]["count"] == 0
