"""The served NER post-processing gives what `pipeline("token-classification")` gives.

Three tiny random token classifiers are built once per module: an uncased BERT
with a WordPiece tokenizer trained here (accents stripped, WordPiece decoder,
`##` pieces, unknown characters), the uncased WordPiece tokenizer of `tiny_models` (no
decoder, padding and truncation baked into tokenizer.json) and a RoBERTa with a
byte-level BPE trained here (trimmed offsets, no prefix space). For each model,
strategy and sentence, the expected list comes from the pipeline; the served
one from `tokenizers.Tokenizer.from_file(tokenizer.json)`, the model's logits
on those ids, and the module loaded from its file alone, as Triton loads it.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
STRATEGIES = ["none", "simple", "first", "average", "max"]
MAX_LENGTH = 24

CORPUS = [
    "Hello world, my name is Sarah Connor and I live in London.",
    "Jean-Baptiste vit à Montréal avec Zoë et François.",
    "The quick brown fox jumps over the lazy dog in New York City.",
    "Angela Merkel met Emmanuel Macron in Berlin on Tuesday.",
    "東京 is a city; Zürich and São Paulo are cities too.",
]

SENTENCES = {
    "short": "Sarah lives in Berlin.",
    "multiword": "Angela Merkel and Emmanuel Macron met in New York City with Jean-Baptiste.",
    "non_ascii": "Zoë et François vivent à Montréal, Zürich et São Paulo; 東京 est loin.",
    # Decomposed accents (e + U+0301): with accent stripping, "Émile"'s first token is shorter than its text.
    "decomposed": "Le\u0301a et E\u0301mile vivent a\u0300 Montre\u0301al avec Zoe\u0308.",
    "unknown": "Ωmega ☃ visited 日本 and Qatar.",
    "whitespace": "   Sarah Connor lives in London \t\n ",
    "too_long": " ".join(["Sarah Connor met Angela Merkel in Berlin and then flew to New York City."] * 4),
    "empty": "",
    "blank": "  \n ",
}


from tritonize.serving import token_classification as tc  # noqa: E402 - the module Triton runs, as a package module

# -- tiny models -------------------------------------------------------------------------------------------------


def _finish(model, folder: Path, seed: int) -> None:
    """Redraw the random classifier so O, entities, I- runs and all-O words all occur, then save.

    The default init (std 0.02) gives near-uniform scores; a wider draw and a bias
    for O and I- over B- give plain text, multi-token entities and argmaxes far from
    ties. The seeds are ones for which test_sentences_exercise_the_hard_cases holds.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 0.5, generator=generator)
        model.classifier.bias.copy_(torch.tensor([1.0, -1.0, 0.5, -1.0, 0.5]))
    model.eval().save_pretrained(folder)


def _config_kwargs(vocab_size: int, **extra) -> dict[str, Any]:
    return dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        **extra,
    )


def build_bert_uncased(folder: Path) -> None:
    """An uncased BERT whose WordPiece vocabulary is trained on CORPUS, saved the way BertTokenizerFast saves.

    Lower-casing strips accents, so decomposed accents make a token shorter than the text it covers.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    # A small vocabulary, so that many words are split into ## pieces.
    trainer = trainers.WordPieceTrainer(vocab_size=160, special_tokens=special, show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    BertTokenizerFast(tokenizer_object=tok, do_lower_case=True, model_max_length=MAX_LENGTH).save_pretrained(folder)
    torch.manual_seed(1)
    config = BertConfig(**_config_kwargs(tok.get_vocab_size(), max_position_embeddings=64))
    _finish(BertForTokenClassification(config), folder, seed=6)


def build_bert_tiny(folder: Path) -> None:
    """The uncased tokenizer of tiny_models: no decoder, and padding/truncation to 16 baked into tokenizer.json."""
    import torch
    from transformers import BertConfig, BertForTokenClassification

    from support.tiny_models import _vocab, build_tokenizer

    build_tokenizer(folder, MAX_LENGTH)
    torch.manual_seed(2)
    config = BertConfig(**_config_kwargs(len(_vocab()), max_position_embeddings=64))
    _finish(BertForTokenClassification(config), folder, seed=3)


def build_roberta(folder: Path) -> None:
    """A RoBERTa with a byte-level BPE trained on CORPUS, trimmed offsets and no prefix space, as RoBERTa saves it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import RobertaConfig, RobertaForTokenClassification, RobertaTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=360,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3, trainer)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False
    )
    RobertaTokenizerFast(tokenizer_object=tok, model_max_length=MAX_LENGTH).save_pretrained(folder)
    torch.manual_seed(3)
    config = RobertaConfig(
        **_config_kwargs(tok.get_vocab_size(), max_position_embeddings=MAX_LENGTH + 2),
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    _finish(RobertaForTokenClassification(config), folder, seed=3)


BUILDERS = {"bert-uncased": build_bert_uncased, "bert-tiny": build_bert_tiny, "roberta-bpe": build_roberta}


@dataclass
class Served:
    """One model folder, its pipeline (the reference) and what a served step holds."""

    folder: Path
    pipe: Any
    model: Any
    labels: list[str]
    cache: dict = field(default_factory=dict)  # (what, text, ...) -> answer: each forward pass runs once

    def tokenizer(self, stride: int = 0):
        """tokenizer.json as the server loads it: truncation at the model's max length, never padding."""
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(MAX_LENGTH, stride=stride)
        return tok

    def logits(self, encoding):
        key = ("logits", tuple(encoding.ids))
        if key not in self.cache:
            self.cache[key] = self._logits(encoding)
        return self.cache[key]

    def _logits(self, encoding):
        import torch

        with torch.no_grad():
            out = self.model(
                input_ids=torch.tensor([encoding.ids]),
                attention_mask=torch.tensor([encoding.attention_mask]),
                token_type_ids=torch.tensor([encoding.type_ids]),
            )
        return out.logits[0].numpy()

    def expected(self, text: str, strategy: str, ignore_labels=None, **kwargs) -> list[dict]:
        """The pipeline's answer (computed once per text, strategy and options)."""
        ignore = None if ignore_labels is None else tuple(ignore_labels)
        key = ("pipeline", text, strategy, ignore, tuple(sorted(kwargs.items())))
        if key not in self.cache:
            if ignore_labels is not None:
                kwargs["ignore_labels"] = list(ignore_labels)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Tokenizer does not support real words" for byte-level BPE
                self.cache[key] = self.pipe(text, aggregation_strategy=strategy, **kwargs)
        return self.cache[key]

    def served(self, text: str, strategy: str, ignore_labels=None) -> list[dict]:
        tok = self.tokenizer()
        encoding = tok.encode(text)
        kwargs = {} if ignore_labels is None else {"ignore_labels": ignore_labels}
        labels = json.loads((self.folder / "config.json").read_text())["id2label"]  # str keys, as a server reads it
        unk = tc.unk_token_id(tok, json.loads((self.folder / "tokenizer_config.json").read_text()).get("unk_token"))
        return tc.entities(
            text,
            encoding.ids,
            encoding.offsets,
            encoding.special_tokens_mask,
            self.logits(encoding),
            labels,
            strategy,
            tok,
            unk_id=unk,
            **kwargs,
        )


@pytest.fixture(scope="module")
def served_models(tmp_path_factory) -> Iterator[dict[str, Served]]:
    import os

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForTokenClassification, pipeline

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster than several on a shared machine

    built = {}
    for name, build in BUILDERS.items():
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        built[name] = Served(
            folder=folder,
            pipe=pipeline("token-classification", model=str(folder), device="cpu"),
            model=AutoModelForTokenClassification.from_pretrained(folder).eval(),
            labels=LABELS,
        )
    yield built
    torch.set_num_threads(threads)


def assert_same(got: list[dict], want: list[dict], context: str) -> None:
    """Same entities, same keys in the same order, same words and offsets, scores within 1e-4; JSON-able."""
    json.dumps(got)
    assert len(got) == len(want), f"{context}\nserved:   {got}\npipeline: {want}"
    for g, w in zip(got, want):
        assert list(g) == list(w), f"{context}: keys {list(g)} != {list(w)}"
        for key, value in w.items():
            if key == "score":
                assert isinstance(g[key], float)
                assert abs(g[key] - float(value)) <= 1e-4, f"{context}: {g} vs {w}"
            else:
                assert g[key] == value, f"{context}: {key} {g[key]!r} != {value!r}\nserved:   {g}\npipeline: {w}"
                assert type(g[key]) in (int, str), f"{context}: {key} is {type(g[key])}"


# -- parity with the pipeline ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ignore", ["default", "keep-all"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", list(BUILDERS))
def test_matches_pipeline(served_models, name, strategy, ignore):
    """Every sentence, with the default ignore_labels and with none ignored (every token then shows, O included)."""
    model = served_models[name]
    ignore_labels = None if ignore == "default" else []
    for key, text in SENTENCES.items():
        want = model.expected(text, strategy, ignore_labels)
        got = model.served(text, strategy, ignore_labels)
        assert_same(got, want, f"{name}/{strategy}/{ignore}/{key}: {text!r}")


@pytest.mark.parametrize("name", list(BUILDERS))
def test_sentences_exercise_the_hard_cases(served_models, name):
    """Guard the parity test against vacuity: entities, O, multi-token groups, pieces, truncation and [] all occur."""
    model = served_models[name]
    none = {key: model.expected(text, "none") for key, text in SENTENCES.items()}
    simple = {key: model.expected(text, "simple") for key, text in SENTENCES.items()}
    first = {key: model.expected(text, "first") for key, text in SENTENCES.items()}
    assert sum(map(len, none.values())) > 10, "the model tags too few tokens for the test to mean anything"
    all_tokens = sum(len(model.expected(text, "none", [])) for text in SENTENCES.values())
    assert sum(map(len, none.values())) < all_tokens, "every token is an entity: O never wins"
    # Some entity groups span several tokens, and word aggregation changes something.
    assert any(
        len([t for t in none[k] if g["start"] <= t["start"] and t["end"] <= g["end"]]) > 1 for k in simple for g in simple[k]
    )
    assert any(first[k] != simple[k] for k in SENTENCES)
    # The long sentence really is cut, and nothing past the cut comes back.
    tok = model.tokenizer()
    long_text = SENTENCES["too_long"]
    cut = tok.encode(long_text)
    tok.no_truncation()
    assert len(cut.ids) == MAX_LENGTH < len(tok.encode(long_text).ids)
    last_char = max(end for _, end in cut.offsets)
    assert all(e["end"] <= last_char for e in model.expected(long_text, "simple", []))
    assert none["empty"] == []
    if name.startswith("bert"):  # WordPiece drops whitespace; byte-level BPE keeps it as tokens that can be tagged
        assert none["blank"] == []


def test_word_pieces_and_unknown_tokens(served_models):
    """The WordPiece models split words into ## pieces and map unseen characters to the unknown token."""
    for name in ("bert-uncased", "bert-tiny"):
        model = served_models[name]
        tokens = [t for text in SENTENCES.values() for t in model.expected(text, "none", [])]
        assert any(t["word"].startswith("##") for t in tokens), name
        unknown = [t for t in model.tokenizer().encode(SENTENCES["unknown"]).tokens if t == "[UNK]"]
        assert unknown, name
        words = {t["word"] for t in model.expected(SENTENCES["unknown"], "none", [])}
        assert "[UNK]" not in words and ("Ωmega" in words or "☃" in words), (name, words)


def test_unknown_token_id_is_the_pipelines(served_models):
    """unk_token_id() finds the id the pipeline compares with, and is what entities() looks up by default."""
    for name, model in served_models.items():
        tok = model.tokenizer()
        config = json.loads((model.folder / "tokenizer_config.json").read_text())
        assert tc.unk_token_id(tok, config.get("unk_token")) == model.pipe.tokenizer.unk_token_id, name
        if name.startswith("bert"):
            assert tc.unk_token_id(tok) == model.pipe.tokenizer.unk_token_id, name
            text = SENTENCES["unknown"]
            enc = tok.encode(text)
            args = (text, enc.ids, enc.offsets, enc.special_tokens_mask, model.logits(enc), LABELS, "first", tok)
            assert tc.entities(*args, ignore_labels=()) == model.served(text, "first", [])
            assert tc.entities(*args, ignore_labels=(), unk_id=None) != model.served(text, "first", [])


def test_decomposed_accents_shorten_a_first_token(served_models):
    """Accent stripping makes a word's first token shorter than its text: WordPiece's is_subword test then fires."""
    text = SENTENCES["decomposed"]
    enc = served_models["bert-uncased"].tokenizer().encode(text)
    first_tokens = [
        (token, text[a:b])
        for token, (a, b), special in zip(enc.tokens, enc.offsets, enc.special_tokens_mask)
        if not special and not token.startswith("##") and token != "[UNK]"
    ]
    assert any(len(token) != len(span) for token, span in first_tokens), first_tokens


def test_text_without_entities(served_models):
    """A text the model tags all O: the pipeline and the module both answer []."""
    for name, model in served_models.items():
        candidates = [w for text in CORPUS for w in text.replace(",", " ").replace(".", " ").split()]
        quiet = [w for w in candidates if model.expected(w, "simple") == []][:2]
        assert quiet, f"{name}: no all-O word to test with"
        for word in quiet:
            for strategy in STRATEGIES:
                assert model.expected(word, strategy) == []
                assert model.served(word, strategy) == []


@pytest.mark.parametrize("name", list(BUILDERS))
def test_stride_windows_match_pipeline(served_models, name):
    """The opt-in stride mode: every overflowing window through entities(), merged by merge_windows()."""
    model = served_models[name]
    text = SENTENCES["too_long"]
    labels = model.labels
    tok = model.tokenizer(stride=4)
    first = tok.encode(text)
    windows = [first, *first.overflowing]
    assert len(windows) > 1
    for strategy in STRATEGIES[1:]:
        for ignore_labels in (None, []):
            kwargs = {} if ignore_labels is None else {"ignore_labels": ignore_labels}
            got = tc.merge_windows(
                [
                    tc.entities(
                        text, w.ids, w.offsets, w.special_tokens_mask, model.logits(w), labels, strategy, tok, **kwargs
                    )
                    for w in windows
                ]
            )
            want = model.expected(text, strategy, ignore_labels, stride=4)
            assert_same(got, want, f"{name}/{strategy}/stride/{ignore_labels}")


# -- the module on its own ---------------------------------------------------------------------------------------


def test_bad_inputs_are_refused(served_models):
    model = served_models["bert-uncased"]
    tok = model.tokenizer()
    enc = tok.encode("Sarah lives in Berlin.")
    logits = model.logits(enc)
    args = (enc.ids, enc.offsets, enc.special_tokens_mask)
    with pytest.raises(ValueError, match="aggregation"):
        tc.entities("Sarah lives in Berlin.", *args, logits, LABELS, "longest", tok)
    with pytest.raises(ValueError, match="logits"):
        tc.entities("Sarah lives in Berlin.", *args, logits[:-1], LABELS, "simple", tok)
    with pytest.raises(ValueError, match="logits"):
        tc.entities("Sarah lives in Berlin.", *args, logits, LABELS[:-1], "simple", tok)
    # Padded logits rows (a batched model output) are ignored; a leading batch axis of 1 is accepted.
    import numpy as np

    padded = np.concatenate([logits, np.full((3, logits.shape[1]), 50.0, dtype=logits.dtype)])
    plain = tc.entities("Sarah lives in Berlin.", *args, logits, LABELS, "simple", tok)
    assert tc.entities("Sarah lives in Berlin.", *args, padded[None], LABELS, "SIMPLE", tok) == plain
