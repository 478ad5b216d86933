"""RepoSpec + artifacts -> rendered layout + copied served modules -> schema validation -> written atomically.

planning.py decides (options -> RepoSpec), rendering.py lays the decisions out through templates/ (every
config parsed into Triton's `ModelConfig`), index.py writes what is about the repository as a whole
(tritonize.yaml, verification.json, health.json, README.md), writing.py puts it on disk atomically.

A repository may serve several models, each in its own folders (`spec.step_names`); adding a model
(`add_model`) moves its folders in and replaces the index files only.
"""

from .index import INDEX_FILES, IndexEntry, health_check, index_files, manifest, read_index, render
from .planning import fused_config_name, graph_refusal, joins, plan, variant_config, versions
from .rendering import RenderedFile, config_as_triton_passes_it, model_files, parse_config, served_files, validate
from .writing import (
    add_model,
    add_version,
    check_add,
    check_joins,
    check_output,
    reconfigure,
    replace_file,
    staging_dir,
    write,
)

__all__ = [
    "INDEX_FILES", "IndexEntry", "RenderedFile", "add_model", "add_version", "check_add", "check_joins", "check_output",
    "config_as_triton_passes_it", "fused_config_name", "graph_refusal", "health_check", "index_files", "joins", "manifest",
    "model_files", "parse_config", "plan", "read_index", "reconfigure", "render", "replace_file", "served_files",
    "staging_dir", "validate", "variant_config", "versions", "write",
]
