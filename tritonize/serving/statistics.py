"""What the served steps count of what the models answer: distributions per model and version, and their baseline.

Served: copied verbatim next to the steps that import it. Each histogram is a Prometheus histogram by its
conventions (`<name>_bucket{le}` cumulative, `<name>_sum`, `<name>_count`) and carries `model` (the name clients
call) and `version`; its bucket bounds were chosen at generation from the baseline sample, and
`<name>_baseline_ratio{le}` (a gauge) is the share of that sample at or below each bound, so a drift rule compares
the window's cumulative shares with the baseline's on the same series a heatmap draws.
"""

from __future__ import annotations

# name -> help text; each a histogram over the rows a step answered.
HISTOGRAMS = {
    "tritonize_tokens_per_text": "Tokens each text became, special tokens included, after truncation.",
    "tritonize_output_top_probability": "A classifier's probability of the label it predicted, per text.",
    "tritonize_output_score": "A reranker's score, per pair.",
    "tritonize_output_centroid_similarity": "Cosine between each embedding and the centroid of the baseline's.",
    "tritonize_output_answer_score": "Question answering: the best answer's score, per question.",
    "tritonize_output_active_terms": "A sparse encoder's terms of non-zero weight, per text.",
    "tritonize_output_vectors_per_text": "A late-interaction model's scored vectors, per text.",
}
# name -> (the label it counts by, or None, help text); each a counter.
COUNTERS = {
    "tritonize_output_label_total": ("label", "A classifier's answers, by the label it predicted."),
    "tritonize_output_entities_total": ("type", "Entities a token classifier returned, by type."),
    "tritonize_output_unanswerable_total": (None, "Questions answered with no span (the empty answer)."),
}
BASELINE_SUFFIX = "_baseline_ratio"  # the gauge beside each histogram: the baseline's cumulative share per bound
STATISTICS_FILE = "statistics.json"  # in the counting step's version folder: bounds and baseline per histogram
