"""Tiny random encoders built at test time: a real BERT graph and a real tokenizer, in seconds.

`build_embedding_model` writes a sentence-transformers folder (mean pooling +
Normalize); `build_classifier` a BertForSequenceClassification folder with
id2label. Both ship a tokenizer.json built with the `tokenizers` library.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the a an is are was of to and in on for with that this it as be by at from or not "
    "hello world triton server model text token batch short long sentence fox dog quick brown jumps over lazy "
    "man eating food machine learning deploy production raw strings fast slow good bad"
).split()


def _vocab() -> list[str]:
    chars = list(string.ascii_lowercase + string.digits + string.punctuation) + list("éèàüöäçñ日本語")
    pieces = ["##" + c for c in string.ascii_lowercase + string.digits]
    seen, vocab = set(), []
    for token in SPECIAL + WORDS + chars + pieces:
        if token not in seen:
            seen.add(token)
            vocab.append(token)
    return vocab


def build_tokenizer(folder: Path, max_length: int) -> Path:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocab = {t: i for i, t in enumerate(_vocab())}
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    # Baked-in truncation and fixed padding, as real tokenizer.json files have: the server must override both.
    tok.enable_truncation(16)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=16)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": max_length,
                "pad_token": "[PAD]",
                "unk_token": "[UNK]",
                "cls_token": "[CLS]",
                "sep_token": "[SEP]",
                "mask_token": "[MASK]",
            }
        )
    )
    return folder / "tokenizer.json"


def _config(max_position: int = 128, **extra):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=len(_vocab()),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=max_position,
        **extra,
    )


def build_embedding_model(folder: Path, max_length: int = 64, seed: int = 0, sentence_transformers: bool = True,
                          outliers: float = 0.0) -> Path:
    """outliers > 0: each output channel of every linear layer gets one weight that many times its largest, so
    int8's per-channel scale leaves the other weights a few levels at most: a model whose int8 error is large
    by construction, whatever a runtime's rounding."""
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    folder = Path(folder)
    model = BertModel(_config()).eval()
    if outliers:
        with torch.no_grad():
            for layer in model.modules():
                if isinstance(layer, torch.nn.Linear):
                    layer.weight[:, 0] = outliers * layer.weight.abs().amax(dim=1)
    model.save_pretrained(folder)
    build_tokenizer(folder, max_length)
    if sentence_transformers:
        (folder / "modules.json").write_text(
            json.dumps(
                [
                    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
                ]
            )
        )
        (folder / "1_Pooling").mkdir(exist_ok=True)
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True})
        )
        (folder / "2_Normalize").mkdir(exist_ok=True)
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_length, "do_lower_case": False}))
    return folder


def build_classifier(folder: Path, labels=("negative", "neutral", "positive"), max_length: int = 64, seed: int = 0) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    folder = Path(folder)
    config = _config(
        num_labels=len(labels),
        id2label={i: l for i, l in enumerate(labels)},
        label2id={l: i for i, l in enumerate(labels)},
    )
    config.architectures = ["BertForSequenceClassification"]
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    build_tokenizer(folder, max_length)
    return folder


# --- Tiny generated repositories (tests/conftest.py's tiny_embedding_repo and tiny_classifier_repo) ----------


@dataclass(frozen=True)
class TinyRepo:
    """A generated repository and the model folder it came from."""

    source: Path  # the Hugging Face / sentence-transformers folder
    repository: Path
    name: str  # the ensemble clients call


def generate_tiny(base: Path, kind: str, **options) -> TinyRepo:
    """A tiny embedder ("emb") or classifier ("cls") and the repository generated from it (`options`: generate's,
    beyond the defaults)."""
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    name = f"tiny{kind}"
    build = build_embedding_model if kind == "emb" else build_classifier
    source = build(base / f"{name}-src")
    repository = generate(GenerateOptions(model=str(source), name=name, output=str(base / f"{name}-repo"), **options))
    return TinyRepo(source=Path(source), repository=Path(repository), name=name)
