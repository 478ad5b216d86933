"""A model folder read once: the floor beneath the tasks and the stages.

The tasks decide from a `ModelFolder` what a folder's head is; `source` (which asks the tasks), `export` and
`verify` stand above them. Nothing here imports a task or a stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import TritonizeError
from .serving.batching import TOKEN_TYPE_IDS

# The sentence-transformers modules that hold the transformers model (MLMTransformer: SparseEncoder's before 5.4).
TRANSFORMER_MODULES = ("Transformer", "MLMTransformer", "CLIPModel")  # CLIPModel: a CLIP folder saved before 5.4
# Modules only a SparseEncoder has: a folder with any of them is sparse even where its config predates model_type.
SPARSE_MODULES = ("MLMTransformer", "SpladePooling", "SparseStaticEmbedding", "SparseAutoEncoder")
# Late interaction (ColBERT): one vector per token, scored by MaxSim. MultiVectorEncoder's modules, PyLate's model
# type and config keys, and Stanford ColBERT's architecture and metadata file each mark such a folder.
MULTI_VECTOR_MODULES = ("MultiVectorMask", "TokenPooling")
MULTI_VECTOR_MODEL_TYPES = ("MultiVectorEncoder", "ColBERT")  # ColBERT: PyLate's, before MultiVectorEncoder
PYLATE_CONFIG_KEYS = ("query_prefix", "document_prefix", "query_length", "document_length", "do_query_expansion",
                      "attend_to_expansion_tokens", "skiplist_words")
STANFORD_COLBERT = ("HF_ColBERT", "artifact.metadata")  # its architecture in config.json, its metadata file


# Two-tower image-and-text models: a vision tower and a text tower, each with its projection.
IMAGE_TEXT_MODEL_TYPES = ("clip", "siglip")


def read_json(path: Path) -> dict | list:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TritonizeError(f"cannot read {path}: {exc}") from exc


@dataclass(frozen=True)
class ModelFolder:
    """A model folder read once: its sentence-transformers modules, if any, and the transformer's config."""

    root: Path
    modules: list[dict] | None  # modules.json of a sentence-transformers folder
    transformer_dir: Path  # the folder with config.json and the weights
    config: dict
    st_config: dict  # config_sentence_transformers.json ({} without one)

    @property
    def architecture(self) -> str:
        return (self.config.get("architectures") or [""])[0]

    @property
    def head_class(self) -> str:
        """"ForSequenceClassification", "ForTokenClassification", ... or "" for a bare encoder."""
        arch = self.architecture
        return arch[arch.index("For"):] if "For" in arch else ""

    @property
    def hidden_size(self) -> int:
        """The width of the model's hidden states, under whichever name its config uses (DistilBERT: dim, T5: d_model)."""
        return int(next((self.config[k] for k in ("hidden_size", "dim", "d_model") if self.config.get(k)), 0))

    @property
    def num_labels(self) -> int:
        return len(self.config.get("id2label") or {}) or int(self.config.get("num_labels") or 0)

    @property
    def is_cross_encoder(self) -> bool:
        """Saved by sentence-transformers' CrossEncoder (old layout: a marker in config.json; new: model_type)."""
        return (
            self.st_config.get("model_type") == "CrossEncoder"
            or "sbert_ce_default_activation_function" in self.config
            or "sentence_transformers" in self.config and "activation_fn" in self.config.get("sentence_transformers", {})
        )

    @property
    def is_sparse_encoder(self) -> bool:
        """Saved by sentence-transformers' SparseEncoder (SPLADE and kin): its model_type, or its own modules."""
        return self.st_config.get("model_type") == "SparseEncoder" or any(
            self.module_kind(m) in SPARSE_MODULES for m in self.modules or ())

    @property
    def late_interaction(self) -> str:
        """What marks a late-interaction (ColBERT) folder, saved by any of the libraries that write one; "" if none."""
        model_type = self.st_config.get("model_type")
        if model_type in MULTI_VECTOR_MODEL_TYPES or any(k in MULTI_VECTOR_MODULES for k in self.module_kinds):
            return f"a late-interaction model (sentence-transformers model_type {model_type!r})"
        if any(str(m.get("type", "")).startswith("pylate.") for m in self.modules or ()) or any(
                k in self.st_config for k in PYLATE_CONFIG_KEYS):
            return "a late-interaction model in PyLate's layout"
        architecture, metadata = STANFORD_COLBERT
        if architecture in (self.config.get("architectures") or ()) or (self.root / metadata).is_file():
            return "a late-interaction model in Stanford ColBERT's layout"
        return ""

    @property
    def image_text(self) -> bool:
        """A two-tower image-and-text model (CLIP, SigLIP), bare or in sentence-transformers' modules."""
        return self.model_type in IMAGE_TEXT_MODEL_TYPES

    @property
    def module_kinds(self) -> tuple[str, ...]:
        """The sentence-transformers modules in order ("Transformer", "Pooling", ...); () without modules.json."""
        return tuple(self.module_kind(m) for m in self.modules or ())

    def uses_token_types(self, tokenizer_inputs: tuple[str, ...]) -> bool:
        """Pairs need token_type_ids where the model has segment embeddings and its tokenizer feeds them
        (transformers passes the model only its tokenizer's model_input_names)."""
        return int(self.config.get("type_vocab_size") or 0) > 1 and TOKEN_TYPE_IDS in tokenizer_inputs

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @staticmethod
    def json(path: Path) -> dict | list:
        return read_json(path)

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
            modules = read_json(root / "modules.json")
            if not isinstance(modules, list):
                raise TritonizeError(f"{root / 'modules.json'} is not a sentence-transformers module list")
        transformer_dir = root
        for module in modules or ():
            if cls.module_kind(module) in TRANSFORMER_MODULES:
                transformer_dir = root / module.get("path", "")
        config_path = transformer_dir / "config.json"
        kinds = [cls.module_kind(m) for m in modules or ()]
        if kinds and not any(k in TRANSFORMER_MODULES for k in kinds) and not config_path.is_file():
            raise TritonizeError(
                f"{root} holds the sentence-transformers modules {', '.join(kinds)} and no Transformer module",
                hint="tritonize serves one stack: a Transformer module, then its head (Pooling, SpladePooling, LogitScore)",
            )
        if not config_path.is_file():
            raise TritonizeError(
                f"no config.json in {transformer_dir}: not a transformers model folder",
                hint="pass a folder saved with save_pretrained() or a sentence-transformers folder",
            )
        config = read_json(config_path)
        if not isinstance(config, dict):
            raise TritonizeError(f"{config_path} is not a JSON object")
        st_path = root / "config_sentence_transformers.json"
        st_config = read_json(st_path) if st_path.is_file() else {}
        return cls(root, modules, transformer_dir, config, st_config if isinstance(st_config, dict) else {})


def saved_model_type(root: str | Path) -> str | None:
    """The model type sentence-transformers reads from a folder it loads (config_sentence_transformers.json's
    model_type, "SentenceTransformer" for folders older than the key), or None where the folder has no modules.json
    and the library builds its default modules instead of reading the folder's."""
    root = Path(root)
    if not (root / "modules.json").is_file():
        return None
    path = root / "config_sentence_transformers.json"
    config = read_json(path) if path.is_file() else {}
    return str(config.get("model_type") or "SentenceTransformer") if isinstance(config, dict) else "SentenceTransformer"


def pad_token_id(tokenizer_file: str, fallback: int = 0) -> int:
    """The id the tokenizer pads with (its own padding setting, else a [PAD]/<pad> token)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_file)
    if tok.padding and tok.padding.get("pad_id") is not None:
        return int(tok.padding["pad_id"])
    for token in ("[PAD]", "<pad>", "<PAD>"):
        token_id = tok.token_to_id(token)
        if token_id is not None:
            return int(token_id)
    return fallback
