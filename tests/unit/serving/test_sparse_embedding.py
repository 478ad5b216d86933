"""The sparse-embedding post step (tritonize/tasks/sparse_embedding/served/sparse_embedding.py) against sentence-transformers' own cut."""

from __future__ import annotations

import numpy as np
import pytest

from tritonize.serving.sparse_embedding import PAD_INDEX, PostStep, active, compact, rows


def splade_like(seed: int, n: int = 6, vocab: int = 300) -> np.ndarray:
    """SPLADE-shaped weights: mostly exact zeros, a ragged number of positive terms per text, one empty text."""
    rng = np.random.default_rng(seed)
    weights = np.where(rng.random((n, vocab)) < rng.uniform(0.01, 0.2, (n, 1)), rng.random((n, vocab)), 0.0)
    weights[-1] = 0.0
    return weights.astype(np.float32)


@pytest.mark.parametrize("limit", [0, 1, 5, 40])
def test_kept_terms_are_those_sparse_encoder_keeps(limit: int) -> None:
    import torch
    from sentence_transformers.util import select_max_active_dims

    weights = splade_like(limit)
    expected = select_max_active_dims(torch.from_numpy(weights), limit or None).numpy()
    indices, values = compact(weights, limit)
    for (ids, vals), want in zip(rows(indices, values), expected):
        assert ids.tolist() == np.flatnonzero(want).tolist()  # ascending, as a coalesced sparse tensor
        assert np.array_equal(vals, want[ids])
    if limit:
        assert max(len(active(w, limit)) for w in weights) == limit


def test_rows_are_padded_to_the_requests_longest_and_never_empty() -> None:
    weights = splade_like(1)
    counts = (weights > 0).sum(1)
    indices, values = compact(weights)
    assert indices.dtype == np.int32 and values.dtype == np.float32
    assert indices.shape == values.shape == (len(weights), counts.max())
    assert ((indices == PAD_INDEX) == (values == 0)).all() and (indices == PAD_INDEX).sum(1).tolist() == (counts.max() - counts).tolist()
    nothing, _ = compact(np.zeros((2, 10), dtype=np.float32))
    assert nothing.tolist() == [[PAD_INDEX], [PAD_INDEX]]  # a well-formed [N, 1] shape for Triton
    assert [len(ids) for ids, _ in rows(*compact(np.zeros((2, 10), dtype=np.float32)))] == [0, 0]


def test_the_post_step_reads_its_names_and_limit_from_the_configuration() -> None:
    config = {"output": [{"name": "indices"}, {"name": "values"}],
              "parameters": {"weights_input": {"string_value": "term_weights"},
                             "max_active_dims": {"string_value": "3"}}}
    step = PostStep.from_config(config, "")
    out = step({"term_weights": splade_like(2), "input_ids": np.zeros((6, 4), dtype=np.int64)})
    assert set(out) == {"indices", "values"} and out["indices"].shape[1] == 3
    with pytest.raises(ValueError, match="returns indices and values"):
        PostStep.from_config({**config, "output": [{"name": "embedding"}]}, "")
