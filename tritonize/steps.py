"""A generated repository's Python steps, loaded outside Triton exactly as the server loads them.

The in-process floor of the benchmark and the tests use the served modules
(`TextEncoder`, `OnnxRunner`) configured from the repository's own configs,
handed over in the form Triton hands them to a Python model: nothing here
has settings of its own.
"""

from __future__ import annotations

from pathlib import Path

from .manifest import read_manifest
from .repository import config_as_triton_passes_it
from .serving.onnx_model import OnnxRunner
from .serving.tokenizer import TextEncoder
from .spec import CONFIG_FILE, LOCAL_CONFIG_DIR, LOCAL_CONFIG_NAME, VERSION, repo_paths


def _step(repo_dir: Path, role: str, config: str) -> tuple[dict, str]:
    folder = repo_paths(repo_dir, read_manifest(repo_dir).name)[role]
    return config_as_triton_passes_it(folder / config), str(folder / VERSION)


def text_encoder(repo_dir: Path) -> TextEncoder:
    """The served tokenizer of a repository."""
    return TextEncoder.from_config(*_step(repo_dir, "tokenizer", CONFIG_FILE))


def onnx_runner(repo_dir: Path, intra_op_threads: int | None = None, shards: int | None = None) -> OnnxRunner:
    """The local server's model step; `intra_op_threads` and `shards` override its configuration (the floor's layouts)."""
    config, version_dir = _step(repo_dir, "model", f"{LOCAL_CONFIG_DIR}/{LOCAL_CONFIG_NAME}.pbtxt")
    return OnnxRunner.from_config(config, version_dir, threads=intra_op_threads, shards=shards)
