"""The bounds behind reliability, without a server: queue sizes from the latency budget, the byte bound
checked before decoding, the supervisor's backoff, a dead stub told from a live one, the health check's sample.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tritonize.client import ServerError, backoff_delays, is_unavailable
from tritonize.manifest import read_manifest
from tritonize.repository import parse_config, reconfigure
from tritonize.runtime import instance
from tritonize.runtime.machine import group_zombies
from tritonize.serving import health, texts
from tritonize.serving.admission import ADMIT_BEHIND, ADMIT_BOUND, ADMIT_BUDGET_US
from tritonize.serving.batching import QUEUE_BOUND
from tritonize.spec import DEFAULT_MAX_REQUEST_BYTES, MIN_QUEUE_SIZE, default_queue_size
from tritonize.spec.options import Overrides

# -- without a server ----------------------------------------------------------------


def test_a_request_over_the_byte_bound_is_refused_before_it_is_decoded() -> None:
    query = np.array([b"a query"], dtype=object).reshape(-1, 1)
    texts_in = np.array([b"ok", b"\xff" * 993], dtype=object).reshape(-1, 1)  # 7 + 2 + 993 = 1002 bytes, invalid UTF-8
    message = (r"^the request carries 1002 bytes of text, over this server's limit of 1000 bytes per request: "
               r"send fewer or shorter texts per request, or raise the limit \(tritonize generate --max-request-bytes\)$")
    with pytest.raises(texts.InvalidText, match=message) as info:
        texts.check_size([query, texts_in], 1000)  # counted over every input, before any text is decoded
    assert info.value.reason == "too_large"
    texts.check_size([query, texts_in], 1002)  # at the bound: accepted
    texts.check_size([np.array([b"x" * 10_000_000], dtype=object)], 0)  # 0: no bound
    with pytest.raises(texts.InvalidText, match=r"TEXT\[1\] is not valid UTF-8"):
        texts.decode(texts_in, "TEXT")
    assert texts.decode(np.array(["x" * 100_000], dtype=object), "TEXT") == ["x" * 100_000]  # no limit per text


def test_a_64_mb_request_is_refused_in_milliseconds() -> None:
    huge = np.array([b"x" * (64 * 1024 * 1024)], dtype=object).reshape(-1, 1)
    start = time.perf_counter()
    with pytest.raises(texts.InvalidText, match="the request carries 67108864 bytes"):
        texts.check_size([huge], DEFAULT_MAX_REQUEST_BYTES)
    assert time.perf_counter() - start < 0.05


def test_queue_bound_is_the_budgets_work_never_below_the_floor() -> None:
    assert default_queue_size(1000, None) == MIN_QUEUE_SIZE == 512  # capacity not measured: the floor
    assert default_queue_size(1000, 130.0) == 512  # a second at 130 req/s is less than the floor
    assert default_queue_size(1000, 2000.4) == 2001
    assert default_queue_size(250, 4000.0) == 1000


def test_backoff_is_exponential_with_full_jitter() -> None:
    delays = [list(backoff_delays(5, 0.05, cap_s=0.3)) for _ in range(200)]
    assert all(len(d) == 5 for d in delays)
    for attempt, limit in enumerate((0.05, 0.1, 0.2, 0.3, 0.3)):
        column = [d[attempt] for d in delays]
        assert 0.0 <= min(column) and max(column) <= limit
        assert max(column) > 0.6 * limit  # spread over the range, not a fixed wait
    assert is_unavailable(ServerError("full", "StatusCode.UNAVAILABLE")) and is_unavailable(ServerError("full", "503"))
    assert not is_unavailable(ServerError("bad", "StatusCode.INVALID_ARGUMENT"))


def test_a_graph_layouts_model_step_bounds_its_queue_and_its_texts_step_runs_each_request(tiny_embedding_repo,
                                                                                           tmp_path) -> None:
    """The default layout: the texts step runs each request on its own (no queue of its own), and the model
    step's queue is bounded as the Python layouts' is, tune's capacity and the queue budget included; two
    one-thread instances, since a bounded queue with one instance stalls Triton 2.51's batcher
    (spec/pipeline.py). --max-queue-size 0 leaves it unbounded."""
    reject = 0  # ModelQueuePolicy.REJECT
    repo = tmp_path / "repo"
    shutil.copytree(tiny_embedding_repo.repository, repo)
    name = tiny_embedding_repo.name
    texts = parse_config((repo / f"{name}_tokenizer" / "config.pbtxt").read_text())

    def model():
        return parse_config((repo / f"{name}_model" / "config.pbtxt").read_text())

    assert not texts.HasField("dynamic_batching")
    assert texts.parameters["max_request_bytes"].string_value == str(2 * 1024 * 1024)
    policy = model().dynamic_batching.default_queue_policy
    assert (policy.max_queue_size, policy.timeout_action, policy.default_timeout_microseconds) == (512, reject,
                                                                                                  1_000_000)
    assert model().instance_group[0].count == 2
    reconfigure(repo, Overrides(capacity_rps=1500.0))  # a second of work at 1500 req/s
    assert model().dynamic_batching.default_queue_policy.max_queue_size == 1500
    reconfigure(repo, Overrides(max_queue_size=0))
    assert not model().dynamic_batching.HasField("default_queue_policy") and model().instance_group[0].count == 1


def test_every_batching_step_gets_a_bounded_queue(tiny_python_repo, tmp_path) -> None:
    """The Python tokenizer step's layout: each batching step bounds its queue."""
    reject = 0  # ModelQueuePolicy.REJECT
    repo = tmp_path / "repo"
    shutil.copytree(tiny_python_repo.repository, repo)
    name = read_manifest(repo).name

    waits: dict[str, int] = {}  # each Triton policy's time bound, microseconds

    def policies() -> dict[str, tuple[int, int] | None]:
        found = {}
        waits.clear()
        for path in sorted(repo.rglob("*.pbtxt")):
            config = parse_config(path.read_text(), str(path))
            if config.platform == "ensemble" or config.name == f"{name}_statistics":
                continue
            batching = config.dynamic_batching
            policy = batching.default_queue_policy if batching.HasField("default_queue_policy") else None
            # The local one step holds its bound itself, as a parameter, and refuses as a REJECT policy does.
            own = int(config.parameters[QUEUE_BOUND].string_value) if QUEUE_BOUND in config.parameters else 0
            assert not (policy and own), f"{path}: two bounds"
            if policy:
                waits[str(path.relative_to(repo))] = policy.default_timeout_microseconds
            found[str(path.relative_to(repo))] = ((policy.max_queue_size, policy.timeout_action) if policy
                                                  else (own, reject) if own else None)
        return found

    def admission() -> dict[str, dict[str, str]]:
        """Each tokenizer config's admission ahead of the model step (serving/admission.py)."""
        found = {}
        for path in sorted(repo.glob(f"{name}_tokenizer/**/*.pbtxt")):
            params = parse_config(path.read_text(), str(path)).parameters
            found[path.name] = {k: params[k].string_value for k in (ADMIT_BEHIND, ADMIT_BUDGET_US, ADMIT_BOUND)
                                if k in params}
        return found

    assert len(policies()) == 4  # tokenizer and model, each with the container's and the local config
    # The production tokenizer step admits for the model step's queue; the fused variant's idle copy does not.
    assert admission() == {"config.pbtxt": {ADMIT_BEHIND: f"{name}_model", ADMIT_BUDGET_US: "1000000",
                                            ADMIT_BOUND: "512"}, "fused.pbtxt": {}}
    # The production ensemble's statistics step has no bound: what reaches it was admitted, and its graph ran.
    counting = parse_config((repo / f"{name}_statistics" / "config.pbtxt").read_text())
    assert counting.HasField("dynamic_batching") and not counting.dynamic_batching.HasField("default_queue_policy")
    assert set(policies().values()) == {(512, reject)}  # the floor: capacity not measured, every step and config
    assert len(waits) == 3 and set(waits.values()) == {1_000_000}  # and a request waits a second at most
    reconfigure(repo, Overrides(model_instances=2))
    assert set(policies().values()) == {(512, reject)}  # instances do not change what a second of work is
    reconfigure(repo, Overrides(capacity_rps=1500.0))  # as `tritonize tune` writes it: a second at 1500 req/s
    assert set(policies().values()) == {(1500, reject)}
    reconfigure(repo, Overrides(queue_budget_ms=500))
    assert set(policies().values()) == {(750, reject)} and set(waits.values()) == {500_000}
    assert admission()["config.pbtxt"] == {ADMIT_BEHIND: f"{name}_model", ADMIT_BUDGET_US: "500000", ADMIT_BOUND: "750"}
    reconfigure(repo, Overrides(max_queue_size=64))  # an explicit size wins
    assert set(policies().values()) == {(64, reject)}
    reconfigure(repo, Overrides(max_queue_size=0))  # no bound: no policy
    assert set(policies().values()) == {None} and admission() == {"config.pbtxt": {}, "fused.pbtxt": {}}
    tokenizer = parse_config((repo / f"{name}_tokenizer" / "config.pbtxt").read_text())
    assert tokenizer.parameters["max_request_bytes"].string_value == str(2 * 1024 * 1024)
    assert tokenizer.parameters["truncate"].string_value == "1"


def test_the_health_request_is_the_tasks_own_sample(tiny_embedding_repo) -> None:
    spec = json.loads((tiny_embedding_repo.repository / health.HEALTH_FILE).read_text())
    assert spec["model"] == tiny_embedding_repo.name
    assert spec["outputs"] == ["embedding"]
    assert spec["request"]["inputs"][0]["shape"] == [1, 1]


ZOMBIES = """
import os, sys, time
from pathlib import Path

def zombie(pid):
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"

children = []
for _ in range(2):
    child = os.fork()
    if child == 0:
        os._exit(0)
    children.append(child)
while not all(map(zombie, children)):
    time.sleep(0.01)
kept, brief = children  # kept is never reaped, as Triton 2.51 leaves a killed stub
print(kept, brief, flush=True)
sys.stdin.readline()
time.sleep(0.2)
os.waitpid(brief, 0)  # brief is reaped, as Triton reaps a stub it ends itself
time.sleep(60)
"""


def test_a_stub_is_dead_once_its_zombie_stays() -> None:
    """A zombie still there after the settle time is a dead stub; one reaped meanwhile is not; one whose step was
    reloaded is left over, not dead."""
    parent = subprocess.Popen([sys.executable, "-c", ZOMBIES], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        kept, brief = map(int, parent.stdout.readline().split())
        record = instance.Instance(pid=parent.pid, start_ticks=None, repository="", host="", reach_host="",
                                   http_port=0, grpc_port=0, metrics_port=0, command=[], started_at=0.0)
        assert instance.dead_stubs(record, settle_s=0.0) == sorted([kept, brief])  # at first look, both
        parent.stdin.write("reap\n")
        parent.stdin.flush()
        assert instance.dead_stubs(record, settle_s=0.6) == [kept]  # brief was reaped 0.2 s into the settle time
        assert brief not in group_zombies(parent.pid)
        watcher = instance.SupervisorState(pid=0, start_ticks=None, server_pid=parent.pid, replaced_stubs=[kept])
        assert instance.dead_stubs(record, watcher) == []
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
