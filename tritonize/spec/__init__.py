"""Typed specs passed between stages, and the single home of every name.

Data flows one way: model folder -> ModelSpec (with its task's Head) -> RepoSpec -> repository -> server ->
client. Every decision (names, dtypes, bucket lengths, batching, instance kinds, runtime parameters) is made
here, in `source.py` or in a task module, once; templates only lay these objects out, and the served modules
read what they need from the configs.

The modules, each beneath the next: `names` (every name), `buckets` (padding and queue arithmetic), `model`
(`ModelSpec`, `Head`, `TensorSpec`), `pipeline` (the ensemble's shape, its step roles), `repo` (`RepoSpec`).
`options` (`GenerateOptions`, `Overrides`) stands above the tasks, whose own options it gathers, so it is not
re-exported here: import it from `tritonize.spec.options`.
"""

from __future__ import annotations

from .buckets import *  # noqa: F403
from .model import *  # noqa: F403
from .names import *  # noqa: F403
from .pipeline import *  # noqa: F403
from .repo import *  # noqa: F403
