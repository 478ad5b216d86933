"""The served modules (tritonize/serving/), imported as the package modules they are and driven with real
tokenizers and onnxruntime; the repository carries byte-identical copies of them.
"""

from __future__ import annotations

import filecmp
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from support.tiny_models import build_embedding_model
from tritonize import chain, serving
from tritonize.bench.server_counters import padding_waste
from tritonize.export import load_torch_model
from tritonize.generate import generate
from tritonize.repository import config_as_triton_passes_it
from tritonize.serving import admission, batching
from tritonize.serving.fused_step import tokenizer_outputs
from tritonize.serving.onnx_model import PARALLEL_MIN_TOKENS, OnnxRunner
from tritonize.serving.tokenizer import Cut, InvalidText, TextEncoder
from tritonize.source import read_model
from tritonize.spec.options import GenerateOptions

IDS, MASK = batching.INPUT_IDS, batching.ATTENTION_MASK


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("steps")
    model = build_embedding_model(base / "tiny", max_length=64)
    return generate(GenerateOptions(model=str(model), name="tiny", output=str(base / "repo"), buckets=[8, 16, 32],
                                    tokenizer="python"))


@pytest.fixture(scope="module")
def encoder(repo: Path) -> TextEncoder:
    return chain.text_encoder(repo)


def runner_for(repo: Path, threads: int, shards: int, max_rows: int = 64, allow_spinning: bool = True,
               busy_session: bool = False) -> OnnxRunner:
    """A runner over the repository's graph with explicit settings (the configured one is chain.onnx_runner)."""
    return OnnxRunner(str(repo / "tiny_model" / "1" / "model.onnx"), threads, [8, 16, 32, 64], 0,
                      allow_spinning=allow_spinning, max_rows=max_rows, shards=shards, busy_session=busy_session)


def until(done, timeout_s: float = 10.0) -> None:
    """Polls until done() holds or the timeout passes: a BatchWorker runs on a thread of its own."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.002)


def test_each_step_carries_byte_identical_copies_of_the_served_modules(repo: Path) -> None:
    pairs = {
        "tiny_tokenizer/1/model.py": "tokenizer.py",
        "tiny_tokenizer/1/admission.py": "admission.py",  # ahead of the model step's queue
        "tiny_tokenizer/1/batching.py": "batching.py",
        "tiny_tokenizer/1/texts.py": "texts.py",
        "tiny_tokenizer/1/metrics.py": "metrics.py",
        "tiny_tokenizer/1/chat.py": "chat.py",
        "tiny_tokenizer/1/multi_vector.py": "multi_vector.py",
        "tiny_tokenizer/1/statistics.py": "statistics.py",
        "tiny_tokenizer/1/stub.py": "stub.py",
        "tiny_tokenizer/1/prefixes.py": "prefixes.py",
        "tiny_tokenizer/1/embedding_statistics.py": "embedding_statistics.py",  # the task's, beside statistics.py
        # The fused step: the tokenizer and the model (serving/fused_step.py) with what both import.
        "tiny_model/1/model.py": "fused_step.py",
        "tiny_model/1/onnx_model.py": "onnx_model.py",
        "tiny_model/1/tokenizer.py": "tokenizer.py",
        "tiny_model/1/admission.py": "admission.py",  # imported by tokenizer.py; the fused step holds its own bound
        "tiny_model/1/batching.py": "batching.py",
        "tiny_model/1/texts.py": "texts.py",
        "tiny_model/1/metrics.py": "metrics.py",
        "tiny_model/1/chat.py": "chat.py",
        "tiny_model/1/multi_vector.py": "multi_vector.py",
        "tiny_model/1/statistics.py": "statistics.py",
        "tiny_model/1/stub.py": "stub.py",
        "tiny_model/1/prefixes.py": "prefixes.py",
        "tiny_model/1/embedding_statistics.py": "embedding_statistics.py",
        # The production ensemble's statistics step, after the graph on Triton's onnxruntime backend.
        "tiny_statistics/1/model.py": "statistics_step.py",
        "tiny_statistics/1/metrics.py": "metrics.py",
        "tiny_statistics/1/statistics.py": "statistics.py",
        "tiny_statistics/1/stub.py": "stub.py",
        "tiny_statistics/1/embedding_statistics.py": "embedding_statistics.py",
    }
    for rel, module in pairs.items():
        assert filecmp.cmp(repo / rel, serving.served_modules()[module], shallow=False), rel
    python_files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*.py"))  # nothing else
    assert python_files == sorted(pairs)


def test_step_files_follow_relative_imports() -> None:
    assert set(serving.step_files("tokenizer", "model.py")) == {"model.py", "batching.py", "texts.py", "metrics.py",
                                                                "statistics.py", "chat.py", "multi_vector.py", "stub.py",
                                                                "prefixes.py", "admission.py"}
    assert set(serving.step_files("onnx_model", "model.py")) == {"model.py", "batching.py", "stub.py"}
    assert set(serving.step_files("fused_step", "model.py")) == {"model.py", "onnx_model.py", "tokenizer.py", "admission.py",
                                                               "batching.py", "texts.py", "metrics.py", "chat.py", "multi_vector.py",
                                                               "statistics.py", "stub.py", "prefixes.py"}
    assert set(serving.step_files("question_answering", "model.py")) == {"model.py", "answer_windows.py",
                                                                         "answer_spans.py", "texts.py", "metrics.py",
                                                                         "statistics.py", "stub.py"}
    assert set(serving.step_files("token_classification", "model.py")) == {"model.py", "batching.py", "texts.py",
                                                                           "metrics.py", "statistics.py", "stub.py",
                                                                           "post_step.py"}
    assert set(serving.step_files("sparse_embedding", "model.py")) == {"model.py", "metrics.py", "statistics.py",
                                                                       "stub.py", "post_step.py"}
    assert set(serving.step_files("statistics_step", "model.py")) == {"model.py", "metrics.py", "statistics.py",
                                                                      "stub.py"}


def test_served_modules_import_only_what_a_triton_container_has() -> None:
    import ast

    allowed = set(sys.stdlib_module_names) | {"numpy", "onnxruntime", "tokenizers", "triton_python_backend_utils"}
    # The serving image's scripts (health.py, procfs.py, watchdog.py) run by path and import their siblings by name.
    allowed |= {path.stem for path in serving.SERVING_DIR.glob("*.py")}

    for path in serving.served_modules().values():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {node.module.split(".")[0]}
            else:
                continue
            # The image step decodes with Pillow (serving/images.py): the serving image does not carry it yet.
            own = {"PIL"} if path.name == "images.py" else set()
            assert roots <= allowed | own, f"{path.name} imports {roots - allowed - own}"


def test_served_modules_fall_back_outside_triton() -> None:
    for name in ("tokenizer", "onnx_model", "fused_step"):
        assert sys.modules[f"tritonize.serving.{name}"].pb_utils is None


def test_the_fused_step_runs_tokenizer_and_model_as_one_step(repo: Path) -> None:
    """Locally the ensemble calls the model step alone, with the texts; it returns the graph's outputs and the
    tokenizer's row outputs, tokenizes as the tokenizer step does and counts under that step's name."""
    local = config_as_triton_passes_it(repo / "tiny" / "configs" / "fused.pbtxt")
    assert [s["model_name"] for s in local["ensemble_scheduling"]["step"]] == ["tiny_model"]
    container = config_as_triton_passes_it(repo / "tiny" / "config.pbtxt")
    assert [s["model_name"] for s in container["ensemble_scheduling"]["step"]] == ["tiny_tokenizer", "tiny_model",
                                                                                  "tiny_statistics"]
    assert {o["name"] for o in local["output"]} == {o["name"] for o in container["output"]}
    step = config_as_triton_passes_it(repo / "tiny_model" / "configs" / "fused.pbtxt")
    tokenizer = config_as_triton_passes_it(repo / "tiny_tokenizer" / "config.pbtxt")
    assert [i["name"] for i in step["input"]] == ["TEXT"]
    produced, passed = tokenizer_outputs(step, [IDS, MASK])
    assert produced == (IDS, MASK, "tokens", "truncated") and passed == ("tokens", "truncated")
    params = {k: v["string_value"] for k, v in step["parameters"].items()}
    # The tokenizer's settings; not its admission ahead of the model step (the fused step holds its bound itself).
    admits = {admission.ADMIT_BEHIND, admission.ADMIT_BUDGET_US, admission.ADMIT_BOUND}
    assert admits <= set(tokenizer["parameters"]) and not admits & set(params)
    assert all(params[k] == v["string_value"] for k, v in tokenizer["parameters"].items() if k not in admits)
    assert params["metrics_model"] == "tiny_tokenizer"
    # One instance that pipelines and holds the bound itself; Triton's bound stays off (it would stall the batcher).
    # The container's model step keeps two instances and Triton's bound.
    assert params[batching.QUEUE_BOUND] == "512" and "default_queue_policy" not in step["dynamic_batching"]
    assert params[batching.GATHER] == "2000"  # the worker's wait for the clients a run answered, in microseconds
    assert [g["count"] for g in step["instance_group"]] == [1]
    container_model = config_as_triton_passes_it(repo / "tiny_model" / "config.pbtxt")
    assert container_model["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 512
    assert [g["count"] for g in container_model["instance_group"]] == [2]
    assert filecmp.cmp(repo / "tiny_model" / "1" / "tokenizer.json", repo / "tiny_tokenizer" / "1" / "tokenizer.json",
                       shallow=False)


def test_the_fused_steps_worker_runs_what_waits_as_one_batch_within_its_bound() -> None:
    """Everything handed over while a run is under way becomes the next run; beyond the bound nothing more may
    wait; closing lets the worker finish and returns nothing left over."""
    import threading

    from tritonize.serving.fused_step import BatchWorker, queue_full_message

    release, runs = threading.Event(), []

    def run(items: list, busy: bool) -> None:
        runs.append(list(items))
        release.wait(10)

    worker = BatchWorker(run, bound=3)
    assert worker.offer(["a"]) == 1
    until(lambda: runs)  # the worker took "a" and is running it
    assert runs == [["a"]]
    assert worker.room(5) == 3
    assert worker.offer(["b", "c"]) == 2
    assert worker.room(5) == 1 and worker.room(1) == 1
    assert worker.offer(["d"]) == 1
    assert worker.room(1) == 0  # full: execute() refuses before decoding anything
    release.set()
    assert worker.close() == []
    assert runs == [["a"], ["b", "c", "d"]]
    with pytest.raises(RuntimeError):
        worker.offer(["e"])
    assert BatchWorker(run).room(10_000) == 10_000  # no bound
    # Counted in work: an offer takes what fits, oldest first; one item always fits an empty queue.
    gate = threading.Event()
    heavy = BatchWorker(lambda items, busy: gate.wait(10), bound=10, work=len, least_work=2)
    assert heavy.offer(["x" * 50]) == 1  # over the bound, alone: taken (a single request is served whole)
    until(lambda: heavy.room(9) == 5)  # the worker runs it; the queue is empty again: five of the least work
    assert heavy.offer(["aaaa", "bbbb", "cc", "d"]) == 3  # 4 + 4 + 2 = 10 fits; "d" would make 11
    assert heavy.room(1) == 0 and heavy.offer(["e"]) == 0  # full: execute() refuses before decoding anything
    gate.set()
    assert heavy.close() == []
    # A batch whose run raises does not take the worker with it: the next batch still runs.
    seen = []

    def flaky(items: list, busy: bool) -> None:
        seen.append(list(items))
        if items == ["boom"]:
            raise RuntimeError("boom")

    survivor = BatchWorker(flaky)
    survivor.offer(["boom"])
    until(lambda: seen)
    survivor.offer(["after"])
    assert survivor.close() == [] and seen == [["boom"], ["after"]]
    # What clients recognise, the bound in work, and where the refused request was read, its own work: a reader
    # must not take the requests for short ones (64 texts of 64 tokens are half of 8192).
    unread, read = queue_full_message(8192), queue_full_message(8192, (None, {"attention_mask": np.ones((64, 64))}))
    assert unread.startswith("Exceeds maximum queue size: ") and read.startswith("Exceeds maximum queue size: ")
    assert "hold up to 8192 tokens of work and leave no room for this one (each text counts its tokens" in unread
    assert "no room for this one's 4096 (64 texts; each text counts its tokens, at least 16)" in read


def test_a_worker_run_takes_at_most_max_rows_rows_on_a_nicer_thread() -> None:
    """Under a backlog each run takes the oldest requests up to the step's max_batch_size rows (an answer waits
    for one batch, not for the whole backlog); a request larger than that runs alone. The worker runs nicer
    than the thread that made it, so under overload execute() keeps the cores it needs to refuse at once."""
    import os
    import threading

    from tritonize.serving.fused_step import GRAPH_NICE, BatchWorker, built_nicer

    release, runs, nice, busy_runs = threading.Event(), [], [], []

    def run(items: list, busy: bool) -> None:
        runs.append(list(items))
        busy_runs.append(busy)
        nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        release.wait(10)

    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    worker = BatchWorker(run, max_rows=4, rows=len, nice=GRAPH_NICE)
    worker.offer(["a"])
    until(lambda: runs)
    worker.offer(["bb", "c", "d", "eeeeee", "f"])  # rows: 2, 1, 1, 6, 1
    release.set()
    assert worker.close() == []
    assert runs == [["a"], ["bb", "c", "d"], ["eeeeee"], ["f"]]
    # The first run followed an idle wait; the backlog's runs each followed the previous one at once.
    assert busy_runs == [False, True, True, True]
    assert set(nice) == {min(19, own + GRAPH_NICE)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own  # the caller's own priority stays
    # The runner is built on a nicer thread, so the threads it starts are nicer; its errors reach the caller.
    assert built_nicer(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), 3) == min(19, own + 3)
    with pytest.raises(ValueError, match="no model"):
        built_nicer(lambda: (_ for _ in ()).throw(ValueError("no model")), 3)


def test_a_run_waits_for_the_clients_the_previous_run_answered_within_the_gather_window() -> None:
    """Closed-loop clients that split into two halves join into one run; the wait ends as soon as they are all
    there, or gather_s after the previous run; a lone client, and a client slower than the window, never wait."""
    import threading

    from tritonize.serving.fused_step import BatchWorker

    runs: list[tuple[list, bool, float]] = []
    ends: list[float] = []
    hold = threading.Event()

    def run(items: list, busy: bool) -> None:
        runs.append((list(items), busy, time.monotonic()))
        if items == ["a", "b"]:
            hold.wait(10)
        ends.append(time.monotonic())

    def ran(n: int) -> None:
        until(lambda: len(ends) >= n)
        assert len(ends) == n

    halves = BatchWorker(run, max_rows=8, gather_s=5.0)
    halves.offer(["a", "b"])  # the first run gathers nothing: no run before it
    until(lambda: runs)
    halves.offer(["c", "d"])  # the other half, waiting while a and b run
    hold.set()
    time.sleep(0.05)
    halves.offer(["a2"])  # a's next request
    time.sleep(0.05)
    sent = time.monotonic()
    halves.offer(["b2"])  # b's: the four clients are all there, the run starts without waiting out the window
    ran(2)
    assert runs[1][:2] == (["c", "d", "a2", "b2"], True)
    assert runs[1][2] - sent < 2.0
    assert halves.close() == []

    runs.clear(), ends.clear()
    window = BatchWorker(run, max_rows=8, gather_s=0.3)
    window.offer(["p", "q"])
    ran(1)
    window.offer(["p2"])  # q's client does not come back: the run waits out the window after the last run
    ran(2)
    assert runs[1][:2] == (["p2"], True)
    assert runs[1][2] - ends[0] >= 0.25
    time.sleep(0.5)  # a client slower than the window
    sent = time.monotonic()
    window.offer(["late"])
    ran(3)
    assert runs[2][:2] == (["late"], False) and runs[2][2] - sent < 0.2
    assert window.close() == []

    runs.clear(), ends.clear()
    lone = BatchWorker(run, max_rows=8, gather_s=5.0)
    for k in range(3):  # one client: each run's one row is all the previous run answered
        sent = time.monotonic()
        lone.offer([f"t{k}"])
        ran(k + 1)
        assert runs[k][2] - sent < 2.0 and runs[k][1] is False
    assert lone.close() == []


def test_bucket_lookup_and_padding() -> None:
    assert batching.parse_buckets("32,8,16") == [8, 16, 32]
    assert batching.parse_buckets("8,16,128", max_length=64) == [8, 16, 64]
    assert [batching.bucket_for(n, [8, 16, 64]) for n in (1, 8, 9, 64, 65)] == [8, 8, 16, 64, 64]
    padded = batching.pad_rows([[5, 6, 7], [8]], 4, 1)
    assert padded.dtype == np.int64 and padded.tolist() == [[5, 6, 7, 1], [8, 1, 1, 1]]
    assert batching.pad_value(IDS, 3) == 3 and batching.pad_value(MASK, 3) == 0


def test_length_groups_stay_within_a_bucket_and_max_rows() -> None:
    lengths = np.array([3, 40, 5, 9, 4, 60])
    groups = batching.length_groups(lengths, np.argsort(lengths, kind="stable"), [8, 16, 64], max_rows=2)
    assert [sorted(lengths[g].tolist()) for g in groups] == [[3, 4], [5], [9], [40, 60]]
    # Longer than every bucket (the bench's padding estimate replays whole contexts): alone, never stuck.
    long = np.array([5, 300, 200])
    groups = batching.length_groups(long, np.argsort(long, kind="stable"), [8, 64], max_rows=4)
    assert [lengths_.tolist() for lengths_ in (long[g] for g in groups)] == [[5], [200], [300]]


def test_length_groups_hold_at_most_the_token_budget_by_their_bucket() -> None:
    """16 rows of bucket 16 and 5 of bucket 64 under a budget of 128 tokens: runs of 8 and of 2 rows."""
    lengths = np.array([12] * 16 + [50] * 5)
    groups = batching.length_groups(lengths, np.argsort(lengths, kind="stable"), [16, 64], max_rows=64,
                                    run_tokens=128)
    assert [len(g) for g in groups] == [8, 8, 2, 2, 1]
    assert sorted(int(r) for g in groups for r in g) == list(range(21))  # every row once
    whole = batching.length_groups(lengths, np.argsort(lengths, kind="stable"), [16, 64], max_rows=64, run_tokens=0)
    assert [len(g) for g in whole] == [16, 5]


def test_config_is_read_as_triton_hands_it_over(repo: Path, encoder: TextEncoder) -> None:
    config = config_as_triton_passes_it(repo / "tiny_tokenizer" / "config.pbtxt")
    assert config["parameters"]["max_length"] == {"string_value": "64"}
    assert encoder.outputs == (IDS, MASK, "tokens", "truncated") and encoder.max_length == 64


def test_each_row_reports_its_tokens_and_whether_it_was_cut(encoder: TextEncoder) -> None:
    """Usage counts come from the served step (the API never tokenizes twice); a cut text is flagged."""
    long = " ".join(["word"] * 200)
    t = encoder.encode(["hello", "the quick brown fox", long])
    assert t["tokens"].dtype == np.int32 and t["tokens"].shape == (3, 1)
    assert t["tokens"][:, 0].tolist() == t[MASK].sum(1).tolist() and t["tokens"][2, 0] == 64
    assert t["truncated"].dtype == bool and t["truncated"][:, 0].tolist() == [False, False, True]


def test_configured_runner_regroups_as_the_server_does(repo: Path) -> None:
    """chain.onnx_runner takes max rows and shards from the generated config, not defaults of its own."""
    config = config_as_triton_passes_it(repo / "tiny_model" / "configs" / "fused.pbtxt")
    runner = chain.onnx_runner(repo)
    assert runner.max_rows == config["max_batch_size"] == 64
    instances = config["instance_group"][0]["count"]
    assert instances == 1 and len(runner.shards) == max(1, (os.cpu_count() or 1) // instances)  # the cores shared
    assert runner.input_names == [IDS, MASK]


def test_buckets_pad_each_request_to_the_smallest_fitting_length(encoder: TextEncoder) -> None:
    assert encoder.buckets == [8, 16, 32, 64]
    t = encoder.encode(["hello"])
    assert t[IDS].shape == (1, 8) and t[IDS].dtype == np.int64
    assert t[MASK][0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]  # [CLS] hello [SEP] + padding
    t = encoder.encode(["hello", "the quick brown fox jumps over the lazy dog and the man"])
    assert t[IDS].shape == (2, 16)
    assert t[MASK].sum(1).tolist() == [3, 14]
    assert encoder.encode(["hello", "a b c"], width=0)[IDS].shape == (2, 5)  # to the longest text


def test_encode_many_pads_per_request_in_one_call(encoder: TextEncoder) -> None:
    results = encoder.encode_many([["hello"], ["hello world " * 10], ["a b"]])
    assert [r[IDS].shape[1] for r in results] == [8, 32, 8]
    alone = encoder.encode(["hello world " * 10])
    assert np.array_equal(results[1][IDS], alone[IDS])


def test_long_text_is_truncated_not_cut_at_the_baked_in_length(encoder: TextEncoder) -> None:
    # tokenizer.json carries truncation at 16 and fixed padding to 16; the model's max length (64) must win.
    t = encoder.encode(["word " * 10_000])
    assert t[IDS].shape == (1, 64) and int(t[MASK].sum()) == 64
    t = encoder.encode(["the quick brown fox jumps over the lazy dog " * 2])
    assert int(t[MASK].sum()) == 20  # 18 words + [CLS] + [SEP], beyond the baked-in 16


def test_a_60_kb_page_is_served_as_sentence_transformers_embeds_it(repo: Path, encoder: TextEncoder, long_page: str) -> None:
    """No text is refused for its length: the step reads the page's first max-length tokens, as the reference does,
    from a prefix of it (exact for this tokenizer)."""
    from sentence_transformers import SentenceTransformer

    assert len(long_page.encode()) > 60_000
    raw = np.array([long_page.encode()], dtype=object).reshape(-1, 1)
    (text,) = encoder.rows({"TEXT": raw}, ["TEXT"])
    assert encoder._prefix(text) != text  # read from a prefix ...
    counts: dict = {}
    (feeds,) = encoder.encode_many([[text]], counts=counts)
    assert feeds[MASK].shape == (1, 64) and int(feeds[MASK].sum()) == 64 and counts["truncated"] == 1
    whole = TextEncoder(str(repo / "tiny_tokenizer" / "1" / "tokenizer.json"), 64, [8, 16, 32, 64], 0, encoder.outputs)
    whole.prefix_chars = 0
    assert all(np.array_equal(feeds[k], v) for k, v in whole.encode([text]).items())  # ... as the whole text
    got = chain.onnx_runner(repo).run_grouped([feeds])[0][0]
    expected = SentenceTransformer(str(repo.parent / "tiny"), device="cpu").encode([long_page])
    assert np.abs(got - expected).max() <= 1e-5


def test_a_request_cut_at_the_start_reads_its_last_tokens_as_the_library_cuts_them(
        repo: Path, encoder: TextEncoder, long_page: str) -> None:
    """truncation_direction left: the tokens of transformers' truncation_side="left", and the embedding
    sentence-transformers computes with it; a request beside it in the same batch is still cut at the end."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(repo.parent / "tiny"), device="cpu")
    short = "the quick brown fox"
    counts: dict = {}
    end, start = encoder.encode_many([[long_page], [long_page, short]], width=0, counts=counts,
                                     cuts=[Cut(), Cut.of({"truncation_direction": "Left"}, 2)])
    assert counts["truncated"] == 2 and start["truncated"][:, 0].tolist() == [True, False]
    model.tokenizer.truncation_side = "left"
    want = model.tokenizer([long_page, short], truncation=True, max_length=64)["input_ids"]
    assert [row[m.astype(bool)].tolist() for row, m in zip(start[IDS], start[MASK])] == want
    assert end[IDS][0].tolist() != start[IDS][0].tolist()  # the first request kept the page's first tokens
    got = chain.onnx_runner(repo).run_grouped([start])[0]
    assert np.abs(got - model.encode([long_page, short])).max() <= 1e-5


def test_a_request_in_windows_reads_each_window_the_tokenizer_strides(repo: Path, encoder: TextEncoder) -> None:
    """windows + window_overlap: row k is window k of its text, as transformers' return_overflowing_tokens
    with stride makes them; a window is no truncated text; a window past the text's last is refused."""
    from transformers import AutoTokenizer

    text = " ".join(f"w{i}" for i in range(120))
    want = AutoTokenizer.from_pretrained(str(repo.parent / "tiny"))(
        text, truncation=True, max_length=64, stride=8, return_overflowing_tokens=True)["input_ids"]
    assert len(want) > 3
    rows = [text] * len(want) + ["short"]
    cut = Cut.of({"windows": ",".join(map(str, [*range(len(want)), 0])), "window_overlap": "8"}, len(rows))
    t = encoder.encode_many([rows], width=0, cuts=[cut])[0]
    assert [row[m.astype(bool)].tolist() for row, m in zip(t[IDS], t[MASK])][:-1] == want
    assert not t["truncated"].any() and t["tokens"][:, 0].tolist()[:-1] == [len(w) for w in want]
    with pytest.raises(InvalidText, match=rf"^TEXT\[0\] has {len(want)} windows .* window {len(want)} does not"):
        encoder.encode_many([[text]], cuts=[Cut.of({"windows": str(len(want)), "window_overlap": 8}, 1)])
    with pytest.raises(InvalidText, match="window_overlap 62 must be under the 62 tokens"):
        encoder.encode_many([[text]], cuts=[Cut.of({"windows": "0", "window_overlap": 62}, 1)])


@pytest.mark.parametrize("params, message", [
    ({"truncation_direction": "middle"}, "truncation_direction must be left or right"),
    ({"windows": "0,1"}, "one window index .* per row"),
    ({"windows": "0,x"}, "comma-separated window indices"),
    ({"windows": "0", "truncation_direction": "left"}, "left does not apply"),
])
def test_a_cut_the_step_cannot_serve_is_refused_in_one_line(params: dict, message: str) -> None:
    with pytest.raises(InvalidText, match=message):
        Cut.of(params, 1)


def test_no_truncate_refuses_an_over_long_text_with_one_line(repo: Path, encoder: TextEncoder) -> None:
    tokenizer_file = str(repo / "tiny_tokenizer" / "1" / "tokenizer.json")
    strict = TextEncoder(tokenizer_file, 64, [8, 16, 32, 64], 0, encoder.outputs, truncate=False)
    fits = "fox " * 62  # 62 tokens and [CLS], [SEP]: exactly the max length
    assert int(strict.encode([fits])[MASK].sum()) == 64
    with pytest.raises(InvalidText, match=r"^TEXT\[1\] is longer than this model's max length of 64 tokens, .*"
                                          r"--truncate\)$") as info:
        strict.encode_many([["ok"], ["fine", fits + "dog"]], counts=(counts := {}))
    assert info.value.reason == "too_long" and counts == {}  # nothing counted for a refused call
    pairs = TextEncoder(tokenizer_file, 64, [64], 0, encoder.outputs, "only_second", truncate=False,
                        names=("QUERY", "TEXT"))
    with pytest.raises(InvalidText, match=r"^QUERY\[0\] and TEXT\[0\] are longer than this model's max length"):
        pairs.encode([("a query", "word " * 100)])


@pytest.mark.parametrize(
    "raw, message",
    [
        (np.array([b"\xff\xfe bad"], dtype=object), "TEXT\\[0\\] is not valid UTF-8"),
        (np.array([b"ok", b""], dtype=object), "TEXT\\[1\\] is empty"),
        (np.array([b"   "], dtype=object), "TEXT\\[0\\] is empty"),
        (np.array([], dtype=object), "no elements"),
    ],
)
def test_bad_text_raises_a_clear_error(encoder: TextEncoder, raw, message: str) -> None:
    with pytest.raises(InvalidText, match=message):
        encoder.decode(raw, "TEXT")


def test_decode_accepts_utf8_bytes_and_shape_n_by_1(encoder: TextEncoder) -> None:
    raw = np.array([["héllo".encode()], ["日本語".encode()]], dtype=object)
    assert encoder.decode(raw, "TEXT") == ["héllo", "日本語"]


@pytest.mark.parametrize("threads", [1, 2], ids=["one-session", "data-parallel"])
def test_onnx_runner_regrouping_matches_pytorch(repo: Path, encoder: TextEncoder, threads: int) -> None:
    """Requests padded to different buckets, regrouped by length (and sharded), give PyTorch's embeddings in order."""
    runner = runner_for(repo, threads, shards=0 if threads == 1 else 2, max_rows=2)
    assert len(runner.shards) == (2 if threads == 2 else 0)
    texts = ["hello", "the quick brown fox " * 6, "a man is eating food", "dog", "world " * 40]
    batches = [encoder.encode([t]) for t in texts[:3]] + [encoder.encode(texts[3:])]
    outputs = runner.run_grouped(batches)
    assert [o[0].shape for o in outputs] == [(1, 32), (1, 32), (1, 32), (2, 32)]
    got = np.concatenate([o[0] for o in outputs])

    spec = read_model(GenerateOptions(model=str(Path(repo) / ".." / "tiny")))
    graph = load_torch_model(spec)
    expected = []
    with torch.no_grad():
        for t in texts:
            feeds = encoder.encode([t])
            expected.append(graph(torch.from_numpy(feeds[IDS]), torch.from_numpy(feeds[MASK])).numpy())
    assert np.abs(got - np.concatenate(expected)).max() <= 1e-5


def spy_runs(runner: OnnxRunner) -> list[tuple[tuple[int, ...], object]]:
    """Record (ids shape, session) of every onnxruntime call the runner makes."""
    calls: list[tuple[tuple[int, ...], object]] = []
    original = runner.run

    def spy(feeds, session=None):
        calls.append((feeds[IDS].shape, session))
        return original(feeds, session)

    runner.run = spy
    return calls


def test_grouping_wastes_less_padding_than_the_longest_row(repo: Path, encoder: TextEncoder) -> None:
    runner = runner_for(repo, 1, shards=0)
    calls = spy_runs(runner)
    runner.run_grouped([encoder.encode(["hello"]), encoder.encode(["dog " * 50]), encoder.encode(["fox"])])
    # Two short rows run together at their own length; the long one alone.
    assert sorted(shape for shape, _ in calls) == [(1, 52), (2, 3)]


def test_data_parallel_shards_take_the_costliest_work_first(repo: Path, encoder: TextEncoder) -> None:
    runner = runner_for(repo, 2, shards=2)
    texts = ["dog " * n for n in (1, 2, 3, 4, 61, 62, 62, 62)]
    batches = [encoder.encode([t]) for t in texts]
    lengths = np.array([int(b[MASK].sum()) for b in batches])
    assert lengths.sum() >= PARALLEL_MIN_TOKENS
    pieces = runner.plan(lengths)
    # Two groups (one bucket each), each cut in two; the long rows go first, so neither shard idles at the end.
    assert [sorted(lengths[p].tolist()) for p in pieces] == [[63, 64], [64, 64], [5, 6], [3, 4]]

    calls = spy_runs(runner)
    sharded = runner.run_grouped(batches)
    assert len(calls) == 4 and all(s in runner.shards for _, s in calls)
    single = runner_for(repo, 1, shards=0)
    for got, want in zip(sharded, single.run_grouped(batches)):
        assert np.abs(got[0] - want[0]).max() <= 1e-5  # same rows back, in request order
    runner.run_grouped([encoder.encode(["dog"])])
    assert calls[-1][1] is runner.session  # a lone row runs on the multi-threaded session


def test_a_small_batch_runs_on_every_core_at_once(repo: Path, encoder: TextEncoder) -> None:
    """Below PARALLEL_MIN_TOKENS a batch is not cut for the shards: it runs whole on the multi-threaded session."""
    runner = runner_for(repo, 2, shards=2)
    small = [encoder.encode(["dog " * n]) for n in (1, 2, 3, 4, 30, 31)]
    assert sum(int(b[MASK].sum()) for b in small) < PARALLEL_MIN_TOKENS
    calls = spy_runs(runner)
    got = runner.run_grouped(small)
    assert [shape for shape, _ in calls] == [(4, 6), (1, 32), (1, 33)] and all(s is runner.session for _, s in calls)
    for g, want in zip(got, runner_for(repo, 1, shards=0).run_grouped(small)):
        assert np.abs(g[0] - want[0]).max() <= 1e-5


def test_one_shard_per_instance_keeps_lone_rows_on_the_wide_session(repo: Path, encoder: TextEncoder) -> None:
    """With two instances on two cores each instance gets one single-threaded shard for batches."""
    runner = runner_for(repo, 2, shards=1)
    assert runner.pool is None and len(runner.shards) == 1
    calls = spy_runs(runner)
    runner.run_grouped([encoder.encode(["dog"]), encoder.encode(["fox"])])
    runner.run_grouped([encoder.encode(["dog"])])
    assert [s for _, s in calls] == [runner.shards[0], runner.session]


def test_threads_spin_only_within_a_run(repo: Path) -> None:
    """The generated config spins intra-op threads during a run and stops them when it ends."""
    runner = chain.onnx_runner(repo)
    assert runner.busy_session is runner.session  # asked for by the one step only: no second copy of the graph
    for session in [runner.session, *runner.shards]:
        options = session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
        assert options.get_session_config_entry("session.force_spinning_stop") == "1"


def test_a_busy_run_goes_to_threads_that_do_not_spin(repo: Path, encoder: TextEncoder) -> None:
    """A run that follows the previous one at once leaves the cores between its operators to the previous
    batch's answers: the one step's runner has a second multi-threaded session without spinning for it, with
    the same answers as the spinning one."""
    def spinning(session) -> str:
        return session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")

    two = runner_for(repo, 2, shards=2, busy_session=True)
    assert (spinning(two.session), spinning(two.busy_session)) == ("1", "0")
    small = [encoder.encode(["dog"]), encoder.encode(["a fox jumps"])]
    calls = spy_runs(two)
    idle, busy = two.run_grouped(small), two.run_grouped(small, busy=True)
    assert [s for _, s in calls] == [two.session, two.busy_session]
    for a, b in zip(idle, busy):
        assert np.array_equal(a[0], b[0])
    # One thread has nothing to spin, and a step that does not spin needs no second copy of the graph.
    for threads, spins in ((1, True), (2, False)):
        lone = runner_for(repo, threads, shards=2, allow_spinning=spins, busy_session=True)
        assert lone.busy_session is lone.session


def test_padding_waste_counts_the_plan_the_server_runs(repo: Path) -> None:
    """Counted with the configured runner's own plan: the figure matches what run_grouped really pads."""
    counts = [3, 52, 4, 30, 31, 5]
    runner = chain.onnx_runner(repo)
    calls = spy_runs(runner)
    runner.run_grouped([{IDS: np.ones((1, n), np.int64), MASK: np.ones((1, n), np.int64)} for n in counts])
    computed = sum(shape[0] * shape[1] for shape, _ in calls)
    waste = padding_waste(counts, batch=len(counts), runner=runner)
    assert waste["computed_tokens"] == computed and waste["real_tokens"] == sum(counts)
    assert waste["waste"] == round((computed - sum(counts)) / sum(counts), 4)


def test_per_token_outputs_come_back_at_each_requests_width(tmp_path: Path) -> None:
    """Token logits of requests padded to different buckets, regrouped together, equal each request run alone."""
    from support import model_zoo

    folder = model_zoo.build("bert-token-cls", tmp_path / "zoo")
    repo = generate(GenerateOptions(model=str(folder), name="tok", output=str(tmp_path / "repo"), buckets=[8, 16, 64],
                                    tokenizer="python"))
    encoder, runner = chain.text_encoder(repo), chain.onnx_runner(repo)
    assert runner.per_token == [True]  # logits [rows, tokens, labels]
    batches = [encoder.encode([t]) for t in ("Sarah", "Sarah lives in Berlin and works in Paris every day", "a b")]
    assert len({b[IDS].shape[1] for b in batches}) == 2  # two buckets in one execute()
    together = runner.run_grouped(batches)
    for batch, got in zip(batches, together):
        alone = runner.run_grouped([batch])[0][0]
        assert got[0].shape == alone.shape == (1, batch[IDS].shape[1], 5)
        n = int(batch[MASK].sum())
        assert np.abs(got[0][:, :n] - alone[:, :n]).max() <= 1e-5
