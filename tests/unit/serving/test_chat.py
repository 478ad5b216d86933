"""A causal reranker's pair template as the tokenizer step applies it (tritonize/serving/chat.py)."""

from __future__ import annotations

from tritonize.serving.chat import PairTemplate

TEMPLATE = PairTemplate("<s>Q: ", "\nD: ", "</s>\nA:", (7, 8, 9))


def test_a_pair_is_the_fixed_parts_around_the_texts() -> None:
    assert TEMPLATE.render("what?", "this.") == "<s>Q: what?\nD: this.</s>\nA:"
    assert PairTemplate.from_json(TEMPLATE.to_json()) == TEMPLATE


def test_a_row_that_reached_the_max_length_ends_in_the_templates_closing_tokens() -> None:
    assert TEMPLATE.restore([1, 2, 3], max_length=6) == [1, 2, 3]  # shorter: its own ending is intact
    assert TEMPLATE.restore([1, 2, 3, 4, 5, 6], max_length=6) == [1, 2, 3, 7, 8, 9]
    assert TEMPLATE.restore([1, 2], max_length=2) == [8, 9]  # shorter than the closing tokens: their end
    assert PairTemplate("a", "b", "c").restore([1, 2, 3], max_length=3) == [1, 2, 3]  # nothing to restore
