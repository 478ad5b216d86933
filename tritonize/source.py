"""Read a model folder and decide its ModelSpec: task and head, max length, tokenizer.

The folder is read once into a `ModelFolder`; the task (asked for, or
detected) reads its own head from it. Every refusal here is a one-line
`TritonizeError` that says what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

from . import tasks
from .errors import TritonizeError
from .folder import ModelFolder, pad_token_id, read_json
from .spec import TOKENIZER_FILE, ModelSpec
from .spec.options import GenerateOptions

# Families whose PyTorch graphs export to ONNX with (input_ids, attention_mask[, token_type_ids]).
# Qwen2/Qwen3, Mistral, Llama and Gemma 2 are decoders, served as embedders (last-token pooling) and scorers;
# Gemma 3 text models as the attention their config declares (EmbeddingGemma: bidirectional); T5 as its encoder.
SUPPORTED_MODEL_TYPES = {
    "albert",
    "bert",
    "camembert",
    "clip",
    "deberta",
    "deberta-v2",
    "distilbert",
    "electra",
    "ernie",
    "gemma2",
    "gemma3_text",
    "llama",
    "mistral",
    "modernbert",
    "mpnet",
    "qwen2",
    "qwen3",
    "roberta",
    "siglip",
    "t5",
    "xlm-roberta",
}
# Encoder-decoder families served as their encoder alone, as sentence-transformers loads them (sentence-t5, GTR),
# and the class that holds that encoder: their other heads need decoder inputs that no served graph has.
ENCODER_ONLY = {"t5": "T5EncoderModel"}
# Families whose position ids start after the padding index (max_position_embeddings - pad - 1 usable).
OFFSET_POSITION_TYPES = {"roberta", "xlm-roberta", "camembert", "mpnet"}
GENERIC_FOLDER_NAMES = {"model", "models", "weights", "checkpoint", "export"}


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
        declared = read_json(st).get("max_seq_length") if st.is_file() else None
        if declared:
            return min(int(declared), limit)
    tok_cfg = transformer_dir / "tokenizer_config.json"
    if tok_cfg.is_file():
        declared = read_json(tok_cfg).get("model_max_length")
        if isinstance(declared, (int, float)) and 0 < declared < 100_000:
            return min(int(declared), limit)
    return limit


def _served_tokenizer(transformer_dir: Path, trust_remote_code: bool,
                      tok: Any = None) -> tuple[str, int, tuple[str, ...]]:
    """(tokenizer.json as transformers itself tokenizes, pad id, the inputs it feeds a model), written once to the cache.

    transformers may rebuild a tokenizer from tokenizer_config.json rather than
    use the folder's tokenizer.json as it is (lower-casing, accents, prefix
    spaces), so the served file is transformers' own backend tokenizer: the
    server tokenizes exactly as the model's library does. `tok`: the tokenizer
    the task's library loaded, where it changes the folder's (special tokens it
    registers); None: AutoTokenizer's.
    """
    own = tok is not None
    try:
        from transformers import AutoTokenizer

        tok = tok or AutoTokenizer.from_pretrained(str(transformer_dir), use_fast=True, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        raise TritonizeError(
            f"transformers could not load the tokenizer in {transformer_dir} ({type(exc).__name__}: {exc})",
            hint="save a fast tokenizer there: AutoTokenizer.from_pretrained(...).save_pretrained(folder)",
        ) from exc
    if not getattr(tok, "is_fast", False) or getattr(tok, "backend_tokenizer", None) is None:
        raise TritonizeError(
            f"the tokenizer in {transformer_dir} has no fast (tokenizers) version",
            hint=f"the server tokenizes with the `tokenizers` library; convert the tokenizer to {TOKENIZER_FILE}",
        )
    # A task's own tokenizer is cached apart from the folder's, and under its contents: the library may change it.
    seed = str(transformer_dir.resolve()) + (tok.backend_tokenizer.to_str() if own else "")
    key = hashlib.sha256(seed.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("TRITONIZE_CACHE", Path.home() / ".cache" / "tritonize")) / f"{transformer_dir.name}-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    tok.backend_tokenizer.save(str(cache / TOKENIZER_FILE))
    pad_id = tok.pad_token_id
    if pad_id is None:
        pad_id = pad_token_id(str(cache / TOKENIZER_FILE))
    return str(cache / TOKENIZER_FILE), int(pad_id), tuple(tok.model_input_names)


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
            hint=f"tritonize serves these families: {', '.join(sorted(SUPPORTED_MODEL_TYPES))}",
        )
    encoder = ENCODER_ONLY.get(model_type)
    if encoder and (folder.head_class or (folder.modules is None and architecture != encoder)):
        raise TritonizeError(
            f"unsupported architecture {architecture!r} (model_type {model_type!r}): {model_type} is served as its "
            f"encoder alone ({encoder}), as sentence-transformers embedders hold it",
            hint=f"serve a sentence-transformers folder, or a {encoder} folder with --task embedding",
        )
    task = tasks.choose(folder, options.task)
    limit = _max_position_limit(config)
    declared = task.tokens.declared_max_length(folder, options)
    max_length = options.max_length or (min(declared, limit) if declared else
                                        _declared_max_length(root, transformer_dir, config))
    if not 2 <= max_length <= limit:
        raise TritonizeError(
            f"--max-length {max_length} is outside what the model supports (2..{limit})",
            hint=f"use --max-length {limit} or less",
        )
    # The head is read at the served max length (a task whose rows have lengths of their own caps them there).
    head = task.detector.read_head(folder, dataclasses.replace(options, max_length=max_length))
    if type(head) is not task.head_type:  # a task built on another's read_head must still answer as itself
        raise TritonizeError(f"task {task.name} read a {head.task} head ({type(head).__qualname__}), not its own "
                             f"{task.head_type.__qualname__}", hint="its read_head builds self.head_type")
    served = tuple(t.name for t in task.ensemble.outputs(head))
    if served != task.contract.output_names:  # the answer its readers read is the one the ensemble returns
        raise TritonizeError(f"task {task.name} serves {', '.join(served)} but its contract reads "
                             f"{', '.join(task.contract.output_names)}", hint="state the outputs once, in its contract")
    tokenizer_file, pad_id, tokenizer_inputs = _served_tokenizer(transformer_dir, options.trust_remote_code,
                                                                 task.tokens.served_tokenizer(folder, options))
    return ModelSpec(
        source=str(transformer_dir),
        head=head,
        max_length=int(max_length),
        architecture=architecture or model_type,
        model_type=model_type,
        tokenizer_file=tokenizer_file,
        pad_token_id=pad_id,
        input_names=task.tokens.token_inputs(folder, tokenizer_inputs),
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
