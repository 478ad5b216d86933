"""Read a model folder and decide its ModelSpec: task and head, max length, tokenizer.

The folder is read once into a `ModelFolder`; the task (asked for, or
detected) reads its own head from it. Every refusal here is a one-line
`TritonizeError` that says what to do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from . import tasks
from .errors import TritonizeError
from .spec import TOKENIZER_FILE, GenerateOptions, ModelSpec

# Encoder families whose PyTorch graphs export to ONNX with (input_ids, attention_mask).
SUPPORTED_MODEL_TYPES = {
    "albert",
    "bert",
    "camembert",
    "deberta",
    "deberta-v2",
    "distilbert",
    "electra",
    "ernie",
    "mpnet",
    "roberta",
    "xlm-roberta",
}
# Families whose position ids start after the padding index (max_position_embeddings - pad - 1 usable).
OFFSET_POSITION_TYPES = {"roberta", "xlm-roberta", "camembert"}
GENERIC_FOLDER_NAMES = {"model", "models", "weights", "checkpoint", "export"}


def _read_json(path: Path) -> dict | list:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TritonizeError(f"cannot read {path}: {exc}") from exc


def resolve_model_dir(model: str) -> Path:
    """A local directory, or a hub id downloaded once into the Hugging Face cache."""
    if not model:
        raise TritonizeError("no model given", hint="pass --model PATH (a transformers or sentence-transformers folder)")
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise TritonizeError(f"{path} is a file, not a model folder", hint="pass the folder that holds config.json")
        return path.resolve()
    if model.count("/") == 1 and not model.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(model))
        except Exception as exc:  # noqa: BLE001 - any hub failure becomes one line
            raise TritonizeError(
                f"{model!r} is not a local folder and could not be downloaded from the hub ({type(exc).__name__})",
                hint="download it first, then pass --model /path/to/folder",
            ) from exc
    raise TritonizeError(f"model folder {path} does not exist", hint="check the --model path")


@dataclass(frozen=True)
class ModelFolder:
    """A model folder read once: its sentence-transformers modules, if any, and the transformer's config."""

    root: Path
    modules: list[dict] | None  # modules.json of a sentence-transformers folder
    transformer_dir: Path  # the folder with config.json and the weights
    config: dict

    @property
    def architecture(self) -> str:
        return (self.config.get("architectures") or [""])[0]

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @staticmethod
    def json(path: Path) -> dict | list:
        return _read_json(path)

    @staticmethod
    def module_kind(module: dict) -> str:
        """"sentence_transformers.models.Pooling" -> "Pooling"."""
        return str(module.get("type", "")).rsplit(".", 1)[-1]

    def module_dir(self, module: dict) -> Path:
        return self.root / module.get("path", "")

    @classmethod
    def read(cls, root: Path) -> ModelFolder:
        modules = None
        if (root / "modules.json").is_file():
            modules = _read_json(root / "modules.json")
            if not isinstance(modules, list):
                raise TritonizeError(f"{root / 'modules.json'} is not a sentence-transformers module list")
        transformer_dir = root
        for module in modules or ():
            if cls.module_kind(module) == "Transformer":
                transformer_dir = root / module.get("path", "")
        config_path = transformer_dir / "config.json"
        if not config_path.is_file():
            raise TritonizeError(
                f"no config.json in {transformer_dir}: not a transformers model folder",
                hint="pass a folder saved with save_pretrained() or a sentence-transformers folder",
            )
        config = _read_json(config_path)
        if not isinstance(config, dict):
            raise TritonizeError(f"{config_path} is not a JSON object")
        return cls(root, modules, transformer_dir, config)


def _max_position_limit(config: dict) -> int:
    limit = int(config.get("max_position_embeddings") or 512)
    if config.get("model_type") in OFFSET_POSITION_TYPES:
        limit -= int(config.get("pad_token_id") or 1) + 1
    return limit


def _declared_max_length(root: Path, transformer_dir: Path, config: dict) -> int:
    """sentence-transformers' max_seq_length, else the tokenizer's, else the position embeddings'."""
    limit = _max_position_limit(config)
    for folder in dict.fromkeys((root, transformer_dir)):
        st = folder / "sentence_bert_config.json"
        declared = _read_json(st).get("max_seq_length") if st.is_file() else None
        if declared:
            return min(int(declared), limit)
    tok_cfg = transformer_dir / "tokenizer_config.json"
    if tok_cfg.is_file():
        declared = _read_json(tok_cfg).get("model_max_length")
        if isinstance(declared, (int, float)) and 0 < declared < 100_000:
            return min(int(declared), limit)
    return limit


def _tokenizer_file(transformer_dir: Path, trust_remote_code: bool) -> str:
    """tokenizer.json, or one converted once from a slow tokenizer by transformers."""
    path = transformer_dir / TOKENIZER_FILE
    if path.is_file():
        return str(path)
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(transformer_dir), use_fast=True, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        raise TritonizeError(
            f"no {TOKENIZER_FILE} in {transformer_dir} and transformers could not load a tokenizer ({exc})",
            hint="save a fast tokenizer there: AutoTokenizer.from_pretrained(...).save_pretrained(folder)",
        ) from exc
    if not getattr(tok, "is_fast", False):
        raise TritonizeError(
            f"the tokenizer in {transformer_dir} has no fast (tokenizers) version",
            hint=f"the server tokenizes with the `tokenizers` library; convert the tokenizer to {TOKENIZER_FILE}",
        )
    cache = Path(os.environ.get("TRITONIZE_CACHE", Path.home() / ".cache" / "tritonize")) / transformer_dir.name
    cache.mkdir(parents=True, exist_ok=True)
    tok.backend_tokenizer.save(str(cache / TOKENIZER_FILE))
    return str(cache / TOKENIZER_FILE)


def read_model(options: GenerateOptions) -> ModelSpec:
    """Decide what the model is. No weights are loaded here."""
    root = resolve_model_dir(options.model)
    folder = ModelFolder.read(root)
    transformer_dir, config = folder.transformer_dir, folder.config
    if config.get("auto_map") and not options.trust_remote_code:
        raise TritonizeError(
            f"{transformer_dir.name} needs code from the model folder to run (auto_map in config.json)",
            hint="read that code, then pass --trust-remote-code to allow it",
        )
    model_type, architecture = folder.model_type, folder.architecture
    if model_type not in SUPPORTED_MODEL_TYPES and not options.trust_remote_code:
        raise TritonizeError(
            f"unsupported architecture {architecture or model_type!r} (model_type {model_type!r})",
            hint=f"tritonize exports encoders: {', '.join(sorted(SUPPORTED_MODEL_TYPES))}",
        )
    task = tasks.get(options.task) if options.task else tasks.detect(folder)
    limit = _max_position_limit(config)
    max_length = options.max_length or _declared_max_length(root, transformer_dir, config)
    if not 2 <= max_length <= limit:
        raise TritonizeError(
            f"--max-length {max_length} is outside what the model supports (2..{limit})",
            hint=f"use --max-length {limit} or less",
        )
    return ModelSpec(
        source=str(transformer_dir),
        head=task.read_head(folder, options),
        max_length=int(max_length),
        architecture=architecture or model_type,
        model_type=model_type,
        tokenizer_file=_tokenizer_file(transformer_dir, options.trust_remote_code),
        sentence_transformers_dir=str(root) if folder.modules else None,
        trust_remote_code=options.trust_remote_code,
    )


def default_name(model: str) -> str:
    """A Triton-safe model name from the folder name."""
    path = Path(model.rstrip("/"))
    base = path.name
    if base.lower() in GENERIC_FOLDER_NAMES and path.parent.name:
        base = path.parent.name
    base = base or "model"
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in base).strip("_-").lower()
    return safe or "model"
