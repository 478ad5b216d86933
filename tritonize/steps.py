"""Load a generated repository's own Python models outside Triton.

The in-process floor of the benchmark and the tests use exactly the code the
server runs: the tokenizer's `TextEncoder` and the local model's `OnnxRunner`,
configured from the same config.pbtxt parameters.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from .errors import TritonizeError
from .repository import load_manifest, parse_config
from .spec import LOCAL_CONFIG_NAME, repo_paths


def load_module(model_py: Path, alias: str) -> ModuleType:
    """Import a generated model.py by path under a unique module name."""
    spec = importlib.util.spec_from_file_location(alias, model_py)
    if spec is None or spec.loader is None:
        raise TritonizeError(f"cannot import {model_py}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module  # so its classes pickle and can be looked up by module name
    spec.loader.exec_module(module)
    return module


def _params(config_path: Path) -> dict[str, str]:
    config = parse_config(config_path.read_text(), str(config_path))
    return {k: v.string_value for k, v in config.parameters.items()}


def text_encoder(repo_dir: Path):
    """The served tokenizer (TextEncoder) of a repository."""
    name = load_manifest(repo_dir)["name"]
    folder = repo_paths(repo_dir, name)["tokenizer"]
    module = load_module(folder / "1" / "model.py", f"tritonize_step_{name}_tokenizer")
    p = _params(folder / "config.pbtxt")
    return module.TextEncoder(
        str(folder / "1" / p["tokenizer_file"]),
        int(p["max_length"]),
        [int(b) for b in p["buckets"].split(",")],
        int(p["pad_id"]),
    )


def onnx_runner(repo_dir: Path, intra_op_threads: int = 0, max_rows: int = 64, shards: int = 0):
    """The served model step (OnnxRunner over the repository's ONNX file)."""
    name = load_manifest(repo_dir)["name"]
    folder = repo_paths(repo_dir, name)["model"]
    module = load_module(folder / "1" / "model.py", f"tritonize_step_{name}_model")
    p = _params(folder / "configs" / f"{LOCAL_CONFIG_NAME}.pbtxt")
    return module.OnnxRunner(
        str(folder / "1" / p["onnx_file"]),
        intra_op_threads or int(p.get("intra_op_threads", "0")) or (os.cpu_count() or 1),
        [int(b) for b in p["buckets"].split(",")],
        int(p["pad_id"]),
        allow_spinning=p.get("allow_spinning", "1") == "1",
        max_rows=max_rows,
        shards=shards,
    )
