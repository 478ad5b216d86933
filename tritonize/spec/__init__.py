"""Typed specs passed between stages, and the single home of every name.

Data flows one way: model folder -> ModelSpec (with its task's Head) -> RepoSpec -> repository -> server ->
client. Every decision (names, dtypes, bucket lengths, batching, instance kinds, runtime parameters) is made
here, in `source.py` or in a task module, once; templates only lay these objects out, and the served modules
read what they need from the configs.

The modules, each beneath the next: `names` (every name, the step roles), `buckets` (padding and queue
arithmetic), `model` (`ModelSpec`, `Head`, `TensorSpec`, what a task declares of its own options), `pipeline`
(the ensemble's shape: which steps, what each runs and passes on), `repo` (`RepoSpec`).
`options` (`GenerateOptions`, `Overrides`) stands above the tasks, whose own options it gathers, so it is not
re-exported here: import it from `tritonize.spec.options`.
"""

from __future__ import annotations

from .buckets import (
    DEFAULT_BUCKET_LADDER,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_QUEUE_BUDGET_MS,
    MIN_QUEUE_SIZE,
    default_buckets,
    default_queue_size,
    normalise_buckets,
)
from .model import (
    ROW_OUTPUTS,
    Head,
    ModelSpec,
    Options,
    TaskOption,
    TensorSpec,
    int_list,
)
from .names import (
    CANDIDATE_SUFFIX,
    CONFIGS_DIR,
    CONFIG_FILE,
    DEFAULT_VARIANT,
    EARLIER_FUSED_CONFIG_NAME,
    ENSEMBLE,
    FIRST,
    FIRST_VERSION,
    FUSED_CONFIG_NAME,
    FUSED_VARIANT,
    GRAPH_LIBRARY_FILE,
    GRAPH_MODEL_FILE,
    RUNS_MODEL_FILE,
    TEXTS_GRAPH_FILE,
    TOKENIZER_GRAPH_FILE,
    LABELS_FILE,
    MANIFEST_FILE,
    MODEL,
    MODELS_KEY,
    MODEL_FILE,
    POST,
    PRODUCTION_VARIANT,
    QUANTIZATION_FILE,
    README_FILE,
    REQUEST_CUTS,
    ROLES,
    ROLLOUT_FILE,
    SERVED_ENTRY,
    STATISTICS,
    STATISTICS_INSTANCES,
    STATISTICS_MODULE,
    TENSORRT_CACHE,
    IMAGE_INPUT,
    TEXT_INPUT,
    TOKENIZER_FILE,
    TOKENIZER_LAYOUTS,
    TOKEN_COUNT_OUTPUT,
    TOKEN_EXTRAS,
    TOKEN_INPUTS,
    TRUNCATED_OUTPUT,
    TRUNCATION_DIRECTION,
    VARIANT_CONFIGS,
    VERIFICATION_FILE,
    VERSION_MANIFEST_FILE,
    WARMUP_DIR,
    WARMUP_TEXT,
    WARMUP_TEXT_FILE,
    WINDOW_OVERLAP,
    WINDOWS,
    StepRole,
    checked_text,
    graph_tensor,
    repo_paths,
    step_names,
)
from .pipeline import (
    EnsembleStep,
    InstanceKind,
    Orchestrated,
    Pipeline,
    Planned,
    PrepareModel,
    StepSpec,
    TokenizeGraphStep,
    TokenizeInGraph,
    TokenizeModel,
    TokenizeModelPost,
    served,
)
from .repo import (
    CONTAINER_MODEL_INSTANCES,
    CPU_INTRA_OP_THREADS,
    DEFAULT_GATHER_US,
    FUSED_STEP_INSTANCES,
    Device,
    FusedRuntimeSpec,
    Precision,
    RepoSpec,
    Shape,
    TensorRTSpec,
    WarmupInputs,
    WarmupSample,
)
