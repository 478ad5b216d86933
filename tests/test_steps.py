"""The generated Python models, imported as real modules and driven with real tokenizers/onnxruntime.

The tokenizer's model.py and the local model's model.py are what the server
runs; here they are imported from a generated repository (outside Triton, the
`pb_utils` import falls back to None) and their logic is checked directly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tiny_models import build_embedding_model
from tritonize import steps
from tritonize.export import load_torch_model
from tritonize.generate import generate
from tritonize.source import read_model
from tritonize.spec import GenerateOptions


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("steps")
    model = build_embedding_model(base / "tiny", max_length=64)
    return generate(GenerateOptions(model=str(model), name="tiny", output=str(base / "repo"), buckets=[8, 16, 32]))


@pytest.fixture(scope="module")
def encoder(repo: Path):
    return steps.text_encoder(repo)


def test_model_py_imports_outside_triton(repo: Path) -> None:
    module = steps.load_module(repo / "tiny_tokenizer" / "1" / "model.py", "tok_under_test")
    assert module.pb_utils is None
    assert hasattr(module, "TritonPythonModel") and hasattr(module, "TextEncoder")


def test_buckets_pad_each_request_to_the_smallest_fitting_length(encoder) -> None:
    assert encoder.buckets == [8, 16, 32, 64]
    ids, mask = encoder.encode(["hello"])
    assert ids.shape == (1, 8) and ids.dtype == np.int64
    assert mask[0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]  # [CLS] hello [SEP] + padding
    ids, mask = encoder.encode(["hello", "the quick brown fox jumps over the lazy dog and the man"])
    assert ids.shape == (2, 16)
    assert mask.sum(1).tolist() == [3, 14]


def test_encode_many_pads_per_request_in_one_call(encoder) -> None:
    results = encoder.encode_many([["hello"], ["hello world " * 10], ["a b"]])
    assert [ids.shape[1] for ids, _ in results] == [8, 32, 8]
    alone = encoder.encode(["hello world " * 10])
    assert np.array_equal(results[1][0], alone[0])


def test_long_text_is_truncated_not_cut_at_the_baked_in_length(encoder) -> None:
    # tokenizer.json carries truncation at 16 and fixed padding to 16; the model's max length (64) must win.
    ids, mask = encoder.encode(["word " * 10_000])
    assert ids.shape == (1, 64) and int(mask.sum()) == 64
    ids, mask = encoder.encode(["the quick brown fox jumps over the lazy dog " * 2])
    assert int(mask.sum()) == 20  # 18 words + [CLS] + [SEP], beyond the baked-in 16


@pytest.mark.parametrize(
    "raw, message",
    [
        (np.array([b"\xff\xfe bad"], dtype=object), "TEXT\\[0\\] is not valid UTF-8"),
        (np.array([b"ok", b""], dtype=object), "TEXT\\[1\\] is empty"),
        (np.array([b"   "], dtype=object), "TEXT\\[0\\] is empty"),
        (np.array([], dtype=object), "no elements"),
    ],
)
def test_bad_text_raises_a_clear_error(encoder, raw, message: str) -> None:
    module = type(encoder).__module__
    import sys

    with pytest.raises(sys.modules[module].InvalidText, match=message):
        encoder.decode(raw)


def test_decode_accepts_utf8_bytes_and_shape_n_by_1(encoder) -> None:
    raw = np.array([["héllo".encode()], ["日本語".encode()]], dtype=object)
    assert encoder.decode(raw) == ["héllo", "日本語"]


@pytest.mark.parametrize("threads", [1, 2], ids=["one-session", "data-parallel"])
def test_onnx_runner_regrouping_matches_pytorch(repo: Path, encoder, threads: int) -> None:
    """Requests padded to different buckets, regrouped by length (and sharded), give PyTorch's embeddings in order."""
    runner = steps.onnx_runner(repo, intra_op_threads=threads, max_rows=2, shards=0 if threads == 1 else 2)
    assert len(runner.shards) == (2 if threads == 2 else 0)
    texts = ["hello", "the quick brown fox " * 6, "a man is eating food", "dog", "world " * 40]
    batches = [encoder.encode([t]) for t in texts[:3]] + [encoder.encode(texts[3:])]
    outputs = runner.run_grouped(batches)
    assert [o[0].shape for o in outputs] == [(1, 32), (1, 32), (1, 32), (2, 32)]
    got = np.concatenate([o[0] for o in outputs])

    spec = read_model(GenerateOptions(model=str(Path(repo) / ".." / "tiny")))
    head = load_torch_model(spec)
    expected = []
    with torch.no_grad():
        for t in texts:
            ids, mask = encoder.encode([t])
            expected.append(head(torch.from_numpy(ids), torch.from_numpy(mask)).numpy())
    assert np.abs(got - np.concatenate(expected)).max() <= 1e-5


def spy_runs(runner) -> list[tuple[tuple[int, ...], object]]:
    """Record (ids shape, session) of every onnxruntime call the runner makes."""
    calls: list[tuple[tuple[int, ...], object]] = []
    original = runner.run

    def spy(ids, mask, session=None):
        calls.append((ids.shape, session))
        return original(ids, mask, session)

    runner.run = spy
    return calls


def test_grouping_wastes_less_padding_than_the_longest_row(repo: Path, encoder) -> None:
    runner = steps.onnx_runner(repo, intra_op_threads=1)
    calls = spy_runs(runner)
    runner.run_grouped([encoder.encode(["hello"]), encoder.encode(["dog " * 50]), encoder.encode(["fox"])])
    # Two short rows run together at their own length; the long one alone.
    assert sorted(shape for shape, _ in calls) == [(1, 52), (2, 3)]


def test_data_parallel_shards_take_the_costliest_work_first(repo: Path, encoder) -> None:
    runner = steps.onnx_runner(repo, intra_op_threads=2, shards=2)
    texts = ["dog " * n for n in (1, 2, 3, 4, 30, 31)]
    batches = [encoder.encode([t]) for t in texts]
    lengths = np.array([int(m.sum()) for _, m in batches])
    pieces = runner._pieces(lengths, np.argsort(lengths, kind="stable"))
    # Two groups (one bucket each), each cut in two; the long rows go first, so neither shard idles at the end.
    assert [sorted(lengths[p].tolist()) for p in pieces] == [[33], [32], [5, 6], [3, 4]]

    calls = spy_runs(runner)
    sharded = runner.run_grouped(batches)
    assert len(calls) == 4 and all(s in runner.shards for _, s in calls)
    single = steps.onnx_runner(repo, intra_op_threads=1)
    for got, want in zip(sharded, single.run_grouped(batches)):
        assert np.abs(got[0] - want[0]).max() <= 1e-5  # same rows back, in request order
    runner.run_grouped([encoder.encode(["dog"])])
    assert calls[-1][1] is runner.session  # a lone row runs on the multi-threaded session


def test_one_shard_per_instance_keeps_lone_rows_on_the_wide_session(repo: Path, encoder) -> None:
    """With two instances on two cores each instance gets one single-threaded shard for batches."""
    runner = steps.onnx_runner(repo, intra_op_threads=2, shards=1)
    assert runner.pool is None and len(runner.shards) == 1
    calls = spy_runs(runner)
    runner.run_grouped([encoder.encode(["dog"]), encoder.encode(["fox"])])
    runner.run_grouped([encoder.encode(["dog"])])
    assert [s for _, s in calls] == [runner.shards[0], runner.session]


def test_threads_spin_only_within_a_run(repo: Path) -> None:
    """The generated config spins intra-op threads during a run and stops them when it ends."""
    runner = steps.onnx_runner(repo, intra_op_threads=2, shards=2)
    for session in [runner.session, *runner.shards]:
        options = session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
        assert options.get_session_config_entry("session.force_spinning_stop") == "1"
