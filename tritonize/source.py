"""Read a model folder and decide its ModelSpec: task, pooling, max length, labels.

Every refusal here is a one-line `TritonizeError` that says what to do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import TritonizeError
from .spec import TASKS, GenerateOptions, ModelSpec

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
ST_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


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


def _sentence_transformers_modules(root: Path) -> list[dict] | None:
    path = root / "modules.json"
    if not path.is_file():
        return None
    modules = _read_json(path)
    if not isinstance(modules, list):
        raise TritonizeError(f"{path} is not a sentence-transformers module list")
    return modules


def _st_layout(root: Path, modules: list[dict]) -> tuple[Path, str, bool]:
    """(transformer folder, pooling, normalize) from a sentence-transformers folder."""
    transformer_dir, pooling, normalize = root, "mean", False
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        sub = root / module.get("path", "")
        if kind == "Transformer":
            transformer_dir = sub
        elif kind == "Pooling":
            cfg = _read_json(sub / "config.json") if (sub / "config.json").is_file() else {}
            modes = [mode for key, mode in ST_POOLING_MODES.items() if cfg.get(key)]
            others = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v and k not in ST_POOLING_MODES]
            if others or len(modes) != 1:
                raise TritonizeError(
                    f"unsupported sentence-transformers pooling {others or modes} in {sub}",
                    hint="tritonize exports mean or CLS pooling",
                )
            pooling = modes[0]
        elif kind == "Normalize":
            normalize = True
        else:
            raise TritonizeError(
                f"unsupported sentence-transformers module {kind!r} in {root}",
                hint="supported modules: Transformer, Pooling (mean/CLS), Normalize",
            )
    return transformer_dir, pooling, normalize


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
    path = transformer_dir / "tokenizer.json"
    if path.is_file():
        return str(path)
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(transformer_dir), use_fast=True, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        raise TritonizeError(
            f"no tokenizer.json in {transformer_dir} and transformers could not load a tokenizer ({exc})",
            hint="save a fast tokenizer there: AutoTokenizer.from_pretrained(...).save_pretrained(folder)",
        ) from exc
    if not getattr(tok, "is_fast", False):
        raise TritonizeError(
            f"the tokenizer in {transformer_dir} has no fast (tokenizers) version",
            hint="the server tokenizes with the `tokenizers` library; convert the tokenizer to tokenizer.json",
        )
    cache = Path(os.environ.get("TRITONIZE_CACHE", Path.home() / ".cache" / "tritonize")) / transformer_dir.name
    cache.mkdir(parents=True, exist_ok=True)
    tok.backend_tokenizer.save(str(cache / "tokenizer.json"))
    return str(cache / "tokenizer.json")


def _detect_task(requested: str | None, modules: list[dict] | None, architecture: str) -> str:
    if requested:
        if requested not in TASKS:
            raise TritonizeError(f"unknown task {requested!r}", hint=f"use one of: {', '.join(TASKS)}")
        return requested
    if modules is not None:
        return "embedding"
    if architecture.endswith("ForSequenceClassification"):
        return "classification"
    raise TritonizeError(
        f"cannot tell the task of a {architecture or 'model without architectures'}",
        hint="pass --task embedding or --task classification",
    )


def read_model(options: GenerateOptions) -> ModelSpec:
    """Decide what the model is. No weights are loaded here."""
    root = resolve_model_dir(options.model)
    modules = _sentence_transformers_modules(root)
    transformer_dir, pooling, normalize = _st_layout(root, modules) if modules else (root, "mean", False)
    config_path = transformer_dir / "config.json"
    if not config_path.is_file():
        raise TritonizeError(
            f"no config.json in {transformer_dir}: not a transformers model folder",
            hint="pass a folder saved with save_pretrained() or a sentence-transformers folder",
        )
    config = _read_json(config_path)
    if config.get("auto_map") and not options.trust_remote_code:
        raise TritonizeError(
            f"{transformer_dir.name} needs code from the model folder to run (auto_map in config.json)",
            hint="read that code, then pass --trust-remote-code to allow it",
        )
    model_type = str(config.get("model_type", ""))
    architecture = (config.get("architectures") or [""])[0]
    if model_type not in SUPPORTED_MODEL_TYPES and not options.trust_remote_code:
        raise TritonizeError(
            f"unsupported architecture {architecture or model_type!r} (model_type {model_type!r})",
            hint=f"tritonize exports encoders: {', '.join(sorted(SUPPORTED_MODEL_TYPES))}",
        )
    task = _detect_task(options.task, modules, architecture)

    limit = _max_position_limit(config)
    max_length = options.max_length or _declared_max_length(root, transformer_dir, config)
    if not 2 <= max_length <= limit:
        raise TritonizeError(
            f"--max-length {max_length} is outside what the model supports (2..{limit})",
            hint=f"use --max-length {limit} or less",
        )

    labels: tuple[str, ...] = ()
    if task == "classification":
        id2label = config.get("id2label") or {}
        if len(id2label) < 2:
            raise TritonizeError(
                "a classification model needs at least two labels (id2label in config.json)",
                hint="set id2label/label2id in config.json, or use --task embedding",
            )
        labels = tuple(str(id2label[k]) for k in sorted(id2label, key=lambda k: int(k)))
    hidden = int(config.get("hidden_size") or config.get("dim") or 0)
    if task == "embedding" and not hidden:
        raise TritonizeError(f"config.json in {transformer_dir} declares no hidden_size")

    return ModelSpec(
        source=str(transformer_dir),
        task=task,  # type: ignore[arg-type]
        max_length=int(max_length),
        # token_type_ids are all zeros for one text per row, which is the model's own default.
        input_names=("input_ids", "attention_mask"),
        hidden_size=hidden,
        architecture=architecture or model_type,
        model_type=model_type,
        pooling=(options.pooling or pooling) if task == "embedding" else None,  # type: ignore[arg-type]
        normalize=(normalize if options.normalize is None else options.normalize) if task == "embedding" else False,
        labels=labels,
        tokenizer_file=_tokenizer_file(transformer_dir, options.trust_remote_code),
        sentence_transformers_dir=str(root) if modules else None,
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
