"""Model versions served: `deploy.py local switch` moves a running server to a new version without refusing a
request (counted under load).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from support.stopping import serving
from support.versions import TEXTS, copy_of, floor
from tritonize.cli import main
from tritonize.manifest import read_manifest
from tritonize.runtime.local import LocalRuntime
from tritonize.spec import PRODUCTION_VARIANT, VARIANT_CONFIGS


def send_until(stop: threading.Event, http_port: int, name: str, texts: list[str], worker: int,
               answers: list[tuple[float, str, int, np.ndarray]], failures: list[str]) -> None:
    """One client sending texts[worker], texts[worker + 1], ... one at a time until `stop`: each answer as (sent at,
    version label, text index, vector), each failure's message."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    i = worker
    while not stop.is_set():
        k = i % len(texts)
        text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[texts[k].encode()]], dtype=object))
        sent = time.monotonic()
        try:
            result = client.infer(name, [text])
            answers.append((sent, result.get_response()["model_version"], k, result.as_numpy("embedding")[0]))
        except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
            failures.append(str(exc)[:200])
        i += 1


@pytest.mark.parametrize("variant", list(VARIANT_CONFIGS))
def test_a_running_server_switches_versions_under_load_without_a_failed_request(
    tiny_embedding_repo, second_model, local_options, local_triton, tmp_path, request, variant: str
) -> None:
    """On both variants of the configs: the production ones run the new version's model step on the native
    onnxruntime backend too."""
    import tritonclient.http as httpclient

    if variant == PRODUCTION_VARIANT:
        request.getfixturevalue("native_backend")
    repo = copy_of(tiny_embedding_repo, tmp_path)
    name = tiny_embedding_repo.name
    old = floor(repo)
    runtime = LocalRuntime(local_options(repo, tmp_path / "run", model_control="explicit"), quiet=True,
                           variant=variant)
    answers: list[tuple[float, str, int, np.ndarray]] = []  # (sent at, version label, text index, vector)
    failures: list[str] = []
    stop = threading.Event()

    with serving(runtime):
        workers = [threading.Thread(target=send_until, args=(stop, runtime.options.http_port, name, TEXTS, w, answers,
                                                             failures)) for w in range(4)]
        for w in workers:
            w.start()
        time.sleep(1.0)
        # The new version is written while the server serves the old one from the same folder.
        assert main(["generate", "--model", str(second_model), "--output", str(repo), "--version", "2"]) == 0
        new = floor(repo)
        time.sleep(0.5)
        done = runtime.switch()
        switched = time.monotonic()
        time.sleep(1.5)
        stop.set()
        for w in workers:
            w.join()
        index = {(m["name"], m["version"]) for m in runtime_index(runtime) if m.get("state") == "READY"}
        backend = httpclient.InferenceServerClient(f"127.0.0.1:{runtime.options.http_port}").get_model_config(
            f"{name}_model", "2")["backend"]
        again = runtime.switch()

    assert failures == []
    assert done.changed and done.version == 2 and done.previous == (1,)
    assert not again.changed
    steps = {d.name for d in repo.iterdir() if (d / "config.pbtxt").is_file()}
    assert {name, f"{name}_model"} <= steps and index == {(step, "2") for step in steps}
    # the fused variant's one Python step, where the layout has one (a graph layout serves its graphs on both)
    fused = variant != PRODUCTION_VARIANT and read_manifest(repo).options.tokenizer == "python"
    assert backend == ("python" if fused else "onnxruntime")
    by_version = {"1": old, "2": new}
    assert not np.allclose(old, new, atol=1e-3)
    for _, label, k, vector in answers:  # every answer is one version's whole answer, and says which
        np.testing.assert_allclose(vector, by_version[label][k], atol=1e-5)
    after = [label for sent, label, _, _ in answers if sent > switched]
    before = [label for sent, label, _, _ in answers if sent < switched - 5]
    assert len(after) > 20 and set(after) == {"2"}
    assert before and set(before) == {"1"}
    print(f"\n{variant} switch under load: {len(answers)} answers, 0 failed; {sum(a[1] == '1' for a in answers)} from version 1, "
          f"{sum(a[1] == '2' for a in answers)} from version 2; loaded in {done.load_s}s, retired in {done.retire_s}s")


def runtime_index(runtime: LocalRuntime) -> list[dict]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{runtime.options.http_port}")
    return client.get_model_repository_index(headers=runtime.admin_headers())
