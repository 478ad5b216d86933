"""A zoo of tiny random model folders, one per family x task x layout a user would bring.

Every folder is built at test time, in a fraction of a second to a couple of seconds,
and saved the way the installed libraries save them:

* the tokenizer is trained or built locally with the `tokenizers` library, in the
  family's real kind (WordPiece, byte-level BPE, Unigram/SentencePiece-style), wrapped
  in the family's own transformers tokenizer class through ``tokenizer_object=`` and
  written with ``save_pretrained`` (so tokenizer_config.json, special tokens and the
  post-processor are what that class writes);
* the model is a 2-layer, hidden-32 random model of the family, saved with
  ``save_pretrained``;
* sentence-transformers folders are written by the installed sentence-transformers
  (``SentenceTransformer(modules=...).save`` / ``CrossEncoder(...).save``), except the
  ``st-legacy`` layout, written by hand as sentence-transformers 2.x did.

`ZOO` is the table (id, family, task, layout, builder); `build(entry, root)` builds one
entry into ``root/<id>``; `check(entry, folder)` loads a built folder back with the
library that saved it and raises `AssertionError` when anything is off (missing or
newly initialised weights, a tokenizer that does not round-trip, wrong special tokens).

Used as ``from model_zoo import ZOO, build, check`` (``tests`` is on pytest's pythonpath), or
``python tests/support/model_zoo.py ROOT [ID ...]`` to build and check entries by hand.

What the installed libraries write (transformers 5.23, sentence-transformers 6.2), which readers must expect:

* tokenizers: only tokenizer.json + tokenizer_config.json (no special_tokens_map.json, vocab.txt or
  sentencepiece model); tokenizer_class is the unified class name (BertTokenizer, not BertTokenizerFast;
  ElectraTokenizerFast saves as BertTokenizer, PreTrainedTokenizerFast as TokenizersBackend);
  tokenizer.json has truncation and padding null.
* SentenceTransformer.save: modules.json types are the new module paths
  (sentence_transformers.base.modules.transformer.Transformer, ...sentence_transformer.modules.pooling.Pooling,
  ...base.modules.dense.Dense, ...base.modules.normalize.Normalize); 1_Pooling/config.json is
  {"embedding_dimension", "pooling_mode": "mean"|"cls"|"lasttoken"|..., "include_prompt"} (no boolean keys,
  no word_embedding_dimension); Dense is N_Dense/config.json {in_features, out_features, bias,
  activation_function: "torch.nn.modules.activation.Tanh", module_input_name, module_output_name} +
  N_Dense/model.safetensors; Normalize gets a config.json; sentence_bert_config.json holds transformer_task /
  modality_config / module_output_name and NO max_seq_length: max_seq_length goes to tokenizer_config.json's
  model_max_length (which also picks up "is_local" / "local_files_only"); config_sentence_transformers.json always
  has prompts ({"query": "", "document": ""} by default), default_prompt_name and similarity_fn_name.
* Llama, Mistral and Gemma tokenizers (SentencePiece BPE with byte fallback) and T5's (Unigram) are built by their
  transformers classes from a vocabulary; add_bos_token / add_eos_token go into tokenizer.json's post-processor,
  not tokenizer_config.json. A Mistral folder's LlamaTokenizer loads, and saves, as TokenizersBackend (without
  mistral-common). sentence-transformers loads T5 as T5EncoderModel, and writes a SentenceTransformer's
  truncate_dim into config_sentence_transformers.json (its encode then cuts to it).
* CrossEncoder.save: modules.json with a single Transformer (path ""), sentence_bert_config.json with
  transformer_task "sequence-classification" and module_output_name "scores",
  config_sentence_transformers.json with model_type "CrossEncoder" and activation_fn
  "torch.nn.modules.activation.Sigmoid"; the weights are a plain XForSequenceClassification (num_labels 1).
* SparseEncoder.save: modules.json with Transformer (path "") and 1_SpladePooling ({"pooling_strategy",
  "activation_function", "embedding_dimension": null}); sentence_bert_config.json with transformer_task "fill-mask";
  config_sentence_transformers.json with model_type "SparseEncoder" and max_active_dims where set; the weights a
  plain XForMaskedLM. sentence-transformers 5.0-5.3 wrote MLMTransformer under sentence_transformers.sparse_encoder.models.
* CrossEncoder over a *ForCausalLM folder: modules.json with Transformer and 1_LogitScore ({"true_token_id",
  "false_token_id", "module_input_name": "causal_logits"}: "yes" and "no"); sentence_bert_config.json with
  transformer_task "text-generation" and a "message" modality (format "flat" or "structured"); the chat template
  as chat_template.jinja; padding_side "left" in tokenizer_config.json; a default prompt goes to the template as a
  system message.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import string
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

HIDDEN = 32
LAYERS = 2
HEADS = 4
INTERMEDIATE = 64
MAX_POSITIONS = 128  # usable positions; families with offset positions get more (see `_config`)
ST_MAX_SEQ_LENGTH = 64  # what sentence-transformers folders declare (max_seq_length)
SEED = 0
SLIDING_WINDOW = 16  # sliding-window length of the Gemma and Mistral configs: shorter than the long verification texts
SPLADE_ACTIVE_SHARE = 0.005  # the share of masked-LM logits a SPLADE zoo model keeps above zero

LABELS = ("negative", "neutral", "positive")
NER_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")

# model_max_length the family's tokenizer_config.json declares when it is not MAX_POSITIONS
# (Qwen3-Embedding: 131072 with 32768 positions).
TOKENIZER_MAX_LENGTH = {"qwen2": 131072, "qwen3": 131072}
# Families whose tokenizers append the end-of-sequence token (the post-processor transformers builds from add_eos_token).
APPENDS_EOS = {"gemma3": True, "gemma2": False, "mistral": True, "llama": False}

# Families whose position ids start after the padding index: real checkpoints ship
# max_position_embeddings = usable + padding_idx + 1 (514 for 512 tokens).
OFFSET_POSITION_FAMILIES = {"roberta", "xlm-roberta", "camembert", "mpnet"}
# Families whose tokenizer is built by its transformers class from a vocabulary (`_build_with_class`).
CLASS_BUILT = {"t5", "gemma3", "gemma2", "mistral", "llama"}

# Text the trained tokenizers learn from: it covers the sentences tritonize verifies with
# (English, accents, German, Japanese, emoji) so that little maps to unknown tokens.
CORPUS = [
    "Hello! Hello world, hello Triton.",
    "Triton serves raw strings.",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food. A man is eating a piece of bread.",
    "Machine learning engineers deploy transformer models to production every day.",
    "Ünïcödé: café, naïve, Zürich, São Paulo, Kraków.",
    "日本語のテキストも正しくトークン化されるべきです。",
    "Ein Satz auf Deutsch, um mehrsprachige Eingaben zu prüfen.",
    "Emoji and symbols 🚀✨ — “quotes”, ‘apostrophes’ and ∑ math ≤ ≥.",
    "   leading and trailing whitespace   ",
    "What is the capital of France? Paris is the capital of France.",
    "This sentence is repeated to produce a long input that is cut at the maximum length.",
    "word0 word1 word2 word3 word4 word5 word6 word7 word8 word9 word10 word42 word299",
    "short, shorter, shortest",
    "The server keeps serving after bad input, and batching merges requests of the same length.",
    "Dynamic batching, ensembles and Python backends are features of the Triton Inference Server.",
    "query: how much protein should a female eat? passage: As a general guideline, 46 grams per day.",
    "Instruct: Given a web search query, retrieve relevant passages that answer the query",
    "John Smith lives in New York and works in London for Acme Corporation.",
    "Who lives in New York? Where does Mary work? When was the tower built?",
    "Le chat est sur la table. La vie est belle à Paris. Où est la gare ?",
    "Das ist gut. Der Hund läuft schnell über die Straße.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14 2024-01-01 $5 50% #1 @user a+b=c",
    "UPPER lower MiXeD CaSe tokens, punctuation! (brackets) [square] {curly} <angle> 'single' \"double\"",
    "The cat sat on the mat. The dog is good. The food was bad. Fast and slow models.",
]

WORDPIECE_TEXT = (
    "the a an is are was of to and in on for with that this it as be by at from or not "
    "hello world triton server model text token batch short long sentence fox dog quick brown jumps over lazy "
    "man eating food machine learning deploy production raw strings fast slow good bad "
    "what who where when capital france paris new york london john smith lives works query passage "
    "input length same requests features python dynamic batching ensembles inference maximum repeated"
)
WORDPIECE_WORDS = WORDPIECE_TEXT.split()


# --------------------------------------------------------------------------- families

@dataclass(frozen=True)
class Family:
    """How one model family is built: its tokenizer and its config."""

    name: str
    model_type: str
    tokenizer_kind: str  # wordpiece | bpe-bytelevel | bpe-bytefallback | unigram
    tokenizer_class: str  # transformers class the tokenizer is wrapped in
    # (single, pair) templates the tokenizer must produce; A/B stand for the texts.
    single: tuple[str, ...]
    pair: tuple[str, ...]
    has_token_type_ids: bool
    encoder: bool = True  # bidirectional encoder (token classification / QA heads make sense)
    # What transformers 5 writes as tokenizer_class when it saves that class: ElectraTokenizerFast is an alias of
    # BertTokenizer, and PreTrainedTokenizerFast of TokenizersBackend (the hub's ModernBERT says PreTrainedTokenizerFast).
    saved_class: str = ""

    @property
    def written_tokenizer_class(self) -> str:
        return self.saved_class or self.tokenizer_class


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("bert", "bert", "wordpiece", "BertTokenizer",
               ("[CLS]", "A", "[SEP]"), ("[CLS]", "A", "[SEP]", "B", "[SEP]"), True),
        Family("distilbert", "distilbert", "wordpiece", "DistilBertTokenizer",
               ("[CLS]", "A", "[SEP]"), ("[CLS]", "A", "[SEP]", "B", "[SEP]"), False),
        Family("electra", "electra", "wordpiece", "ElectraTokenizerFast",
               ("[CLS]", "A", "[SEP]"), ("[CLS]", "A", "[SEP]", "B", "[SEP]"), True, saved_class="BertTokenizer"),
        Family("mpnet", "mpnet", "wordpiece", "MPNetTokenizer",
               ("<s>", "A", "</s>"), ("<s>", "A", "</s>", "</s>", "B", "</s>"), False),
        Family("roberta", "roberta", "bpe-bytelevel", "RobertaTokenizer",
               ("<s>", "A", "</s>"), ("<s>", "A", "</s>", "</s>", "B", "</s>"), False),
        Family("xlm-roberta", "xlm-roberta", "unigram", "XLMRobertaTokenizer",
               ("<s>", "A", "</s>"), ("<s>", "A", "</s>", "</s>", "B", "</s>"), False),
        Family("camembert", "camembert", "unigram", "CamembertTokenizer",
               ("<s>", "A", "</s>"), ("<s>", "A", "</s>", "</s>", "B", "</s>"), False),
        Family("albert", "albert", "unigram", "AlbertTokenizer",
               ("[CLS]", "A", "[SEP]"), ("[CLS]", "A", "[SEP]", "B", "[SEP]"), True),
        Family("deberta-v2", "deberta-v2", "unigram", "DebertaV2Tokenizer",
               ("[CLS]", "A", "[SEP]"), ("[CLS]", "A", "[SEP]", "B", "[SEP]"), True),
        Family("modernbert", "modernbert", "bpe-bytelevel", "PreTrainedTokenizerFast",
               ("[CLS]", "A", "[SEP]"), ("[CLS]", "A", "[SEP]", "B", "[SEP]"), False, saved_class="TokenizersBackend"),
        Family("qwen2", "qwen2", "bpe-bytelevel", "Qwen2Tokenizer",
               ("A",), ("A", "B"), False, encoder=False),
        # Qwen3-Embedding / Qwen3-Reranker-seq-cls ship a post-processor that appends <|endoftext|>.
        Family("qwen3", "qwen3", "bpe-bytelevel", "Qwen2Tokenizer",
               ("A", "<|endoftext|>"), ("A", "<|endoftext|>", "B", "<|endoftext|>"), False, encoder=False),
        # sentence-t5 / GTR: SentencePiece Unigram, </s> appended, no BOS.
        Family("t5", "t5", "unigram", "T5Tokenizer", ("A", "</s>"), ("A", "</s>", "B", "</s>"), False),
        # SentencePiece BPE with byte fallback. EmbeddingGemma's tokenizer adds <bos> and appends <eos>;
        # bge-multilingual-gemma2's adds <bos> only.
        Family("gemma3", "gemma3_text", "bpe-bytefallback", "GemmaTokenizer", ("<bos>", "A", "<eos>"),
               ("<bos>", "A", "<eos>", "<bos>", "B", "<eos>"), False, encoder=False),
        Family("gemma2", "gemma2", "bpe-bytefallback", "GemmaTokenizer", ("<bos>", "A"), ("<bos>", "A", "<bos>", "B"),
               False, encoder=False),
        # e5-mistral / SFR-Embedding-Mistral append </s> (add_eos_token); a plain Llama tokenizer adds <s> only.
        # transformers 5 loads a Mistral folder's LlamaTokenizer as TokenizersBackend (tokenizer.json as it is)
        # unless mistral-common is installed, and saves it under that name.
        Family("mistral", "mistral", "bpe-bytefallback", "LlamaTokenizer", ("<s>", "A", "</s>"),
               ("<s>", "A", "</s>", "<s>", "B", "</s>"), False, encoder=False, saved_class="TokenizersBackend"),
        Family("llama", "llama", "bpe-bytefallback", "LlamaTokenizer", ("<s>", "A"), ("<s>", "A", "<s>", "B"), False,
               encoder=False),
    ]
}


# --------------------------------------------------------------------------- tokenizers

def _wordpiece_vocab(specials: list[str]) -> dict[str, int]:
    chars = list(string.ascii_lowercase + string.digits + string.punctuation) + sorted(
        set("".join(CORPUS).lower()) - set(string.ascii_lowercase + string.digits + string.punctuation + " ")
    )
    pieces = ["##" + c for c in chars]
    seen: dict[str, int] = {}
    for token in specials + WORDPIECE_WORDS + chars + pieces:
        if token not in seen and token.strip():
            seen[token] = len(seen)
    return seen


def _train_bpe_bytelevel(tok, vocab_size: int, specials: list[str], extra_corpus: tuple[str, ...] = ()):
    from tokenizers import pre_tokenizers, trainers

    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((CORPUS + list(extra_corpus)) * 2, trainer=trainer)
    return tok


def _build_unigram(tok, vocab_size: int, specials: list[str], unk: str):
    """A SentencePiece-style Unigram model built from the corpus, deterministically.

    (`tokenizers`' UnigramTrainer is not: which pieces it keeps changes from run to run.) Pieces are every
    character and the most useful substrings (up to 6 characters) of the normalised, pre-tokenised corpus
    words; scores are log frequencies, as a unigram language model has them.
    """
    import math
    from collections import Counter

    from tokenizers import models

    words: Counter = Counter()
    for line in CORPUS:
        text = tok.normalizer.normalize_str(line) if tok.normalizer else line
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(text):
            words[word] += 1
    pieces: Counter = Counter()
    for word, count in words.items():
        for i in range(len(word)):
            for j in range(i + 1, min(len(word), i + 6) + 1):
                pieces[word[i:j]] += count
    chars = sorted(p for p in pieces if len(p) == 1)
    budget = vocab_size - len(specials) - len(chars)
    multi = sorted((p for p in pieces if len(p) > 1 and pieces[p] >= 2), key=lambda p: (-pieces[p] * len(p), p))
    kept = chars + multi[:budget]
    total = sum(pieces[p] for p in kept)
    scored = sorted(((p, round(math.log(pieces[p] / total), 6)) for p in kept), key=lambda v: (-v[1], v[0]))
    vocab = [(piece, 0.0) for piece in specials] + [v for v in scored if v[0] not in specials]
    tok.model = models.Unigram(vocab, unk_id=specials.index(unk), byte_fallback=False)
    return tok


def _train_sentencepiece_bpe(specials: list[str], vocab_size: int, prefix_space: bool) -> tuple[dict[str, int], list]:
    """A SentencePiece-style BPE vocabulary (Llama, Mistral, Gemma): the special tokens, the 256 byte pieces
    <0x00>..<0xFF> byte fallback maps unknown characters to, then pieces learned on the corpus with words
    marked by a leading "▁". Learned on the corpus's Latin text only, so CJK and emoji go to byte fallback, as
    a real vocabulary sends rare characters (and the alphabet is the same on every run)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    latin = ["".join(c for c in line if ord(c) < 0x250) for line in CORPUS]
    tok.train_from_iterator([("▁" if prefix_space else "") + line for line in latin] * 2, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab: dict[str, int] = {}
    for piece in specials + [f"<0x{b:02X}>" for b in range(256)] + sorted(model["vocab"], key=model["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return vocab, merges


def _build_with_class(family: str, model_max_length, extra: dict):
    """Tokenizers of families whose transformers class builds its own pipeline (normaliser, pre-tokenizer,
    post-processor) from a vocabulary, as transformers 5 does when it converts a hub checkpoint."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    kwargs: dict = {} if model_max_length is None else {"model_max_length": model_max_length}
    if family == "t5":  # <pad>=0 </s>=1 <unk>=2, then the pieces, then 100 sentinels <extra_id_N>
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
        ])
        _build_unigram(tok, 500, ["<pad>", "</s>", "<unk>"], "<unk>")
        vocab = [tuple(piece) for piece in json.loads(tok.to_str())["model"]["vocab"]]
        return transformers.T5Tokenizer(vocab=vocab, extra_ids=100, **kwargs, **extra)
    eos = {"add_bos_token": True, "add_eos_token": APPENDS_EOS[family]}
    if family in ("gemma3", "gemma2"):  # <pad>=0 <eos>=1 <bos>=2 <unk>=3 <mask>=4; no prefix space
        vocab, merges = _train_sentencepiece_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"], 400, False)
        return transformers.GemmaTokenizer(vocab=vocab, merges=merges, **eos, **kwargs, **extra)
    # Llama / Mistral: <unk>=0 <s>=1 </s>=2; no pad token of their own (the embedders pad with </s>)
    vocab, merges = _train_sentencepiece_bpe(["<unk>", "<s>", "</s>"], 400, True)
    return transformers.LlamaTokenizer(vocab=vocab, merges=merges, pad_token="</s>", **eos, **kwargs, **extra)


def build_tokenizer(folder: Path, family: str, model_max_length: int | str | None = "auto",
                    extra_corpus: tuple[str, ...] = (), **extra):
    """Train/build the family's tokenizer, wrap it in the family's class, save_pretrained it into `folder`.

    `model_max_length`: "auto" is what the family ships (MAX_POSITIONS, or Qwen's 131072, more than its
    positions); None leaves model_max_length out of tokenizer_config.json.
    `extra_corpus`: more text a byte-level BPE learns from (a reranker's "yes" and "no" tokens).
    Returns the wrapped transformers tokenizer.
    """
    import transformers
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    fam = FAMILIES[family]
    kwargs: dict = {}
    if model_max_length == "auto":
        model_max_length = TOKENIZER_MAX_LENGTH.get(family, MAX_POSITIONS)
    if family in CLASS_BUILT:
        wrapped = _build_with_class(family, model_max_length, extra)
        return _save_tokenizer(wrapped, folder, model_max_length)
    if fam.tokenizer_kind == "wordpiece":
        if family == "mpnet":  # all-mpnet-base-v2: <s>=0 <pad>=1 </s>=2 <unk>=3 ... [UNK] is the unk token
            specials = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"]
            cls_, sep_, unk, pad = "<s>", "</s>", "[UNK]", "<pad>"
            kwargs.update(bos_token="<s>", eos_token="</s>", mask_token="<mask>")
        else:  # bert-base-uncased order
            specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
            cls_, sep_, unk, pad = "[CLS]", "[SEP]", "[UNK]", "[PAD]"
            kwargs.update(mask_token="[MASK]")
        vocab = _wordpiece_vocab(specials)
        tok = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        if family == "mpnet":
            tok.post_processor = processors.RobertaProcessing((sep_, vocab[sep_]), (cls_, vocab[cls_]))
        else:
            tok.post_processor = processors.TemplateProcessing(
                single=f"{cls_}:0 $A:0 {sep_}:0",
                pair=f"{cls_}:0 $A:0 {sep_}:0 $B:1 {sep_}:1",
                special_tokens=[(cls_, vocab[cls_]), (sep_, vocab[sep_])],
            )
        kwargs.update(do_lower_case=True, unk_token=unk, pad_token=pad, cls_token=cls_, sep_token=sep_)

    elif family == "roberta":  # roberta-base: <s>=0 <pad>=1 </s>=2 <unk>=3, <mask> last
        tok = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        _train_bpe_bytelevel(tok, 600, ["<s>", "<pad>", "</s>", "<unk>"])
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")), trim_offsets=True, add_prefix_space=False
        )
        kwargs.update(bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                      pad_token="<pad>", mask_token="<mask>", add_prefix_space=False, trim_offsets=True)

    elif family == "modernbert":  # OLMo byte-level BPE; [UNK] [CLS] [SEP] [PAD] [MASK] appended after the BPE vocab
        tok = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
        tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
        _train_bpe_bytelevel(tok, 600, ["<|padding|>", "<|endoftext|>"])
        from tokenizers import AddedToken

        tok.add_special_tokens([AddedToken(t, special=True) for t in ["[UNK]", "[CLS]", "[SEP]", "[PAD]"]])
        tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True)])
        cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0",
            pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
        kwargs.update(cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]", pad_token="[PAD]",
                      mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"],
                      clean_up_tokenization_spaces=True)

    elif family in ("qwen2", "qwen3"):  # Qwen2 tokenizer: NFC, regex split, byte-level BPE, no BOS
        tok = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                                   byte_fallback=False))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(
                Regex(r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""),
                behavior="isolated", invert=False,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
        _train_bpe_bytelevel(tok, 600, [], extra_corpus)
        from tokenizers import AddedToken

        tok.add_special_tokens([AddedToken(t, special=True) for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
        if family == "qwen3":  # Qwen3-Embedding: the post-processor appends <|endoftext|> (last-token pooling reads it)
            eot = tok.token_to_id("<|endoftext|>")
            tok.post_processor = processors.TemplateProcessing(
                single="$A:0 <|endoftext|>:0",
                pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
                special_tokens=[("<|endoftext|>", eot)],
            )
            kwargs.update(eos_token="<|im_end|>")
        else:
            tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
            kwargs.update(eos_token="<|endoftext|>")
        kwargs.update(bos_token=None, unk_token=None, pad_token="<|endoftext|>", errors="replace",
                      add_prefix_space=False, clean_up_tokenization_spaces=False, split_special_tokens=False)

    elif fam.tokenizer_kind == "unigram":
        if family == "xlm-roberta":  # fairseq order: <s>=0 <pad>=1 </s>=2 <unk>=3, <mask> last
            specials, unk = ["<s>", "<pad>", "</s>", "<unk>"], "<unk>"
            bos, eos, cls_, sep_, pad, mask = "<s>", "</s>", "<s>", "</s>", "<pad>", "<mask>"
        elif family == "camembert":
            specials, unk = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"], "<unk>"
            bos, eos, cls_, sep_, pad, mask = "<s>", "</s>", "<s>", "</s>", "<pad>", "<mask>"
        elif family == "albert":  # albert-base-v2: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4
            specials, unk = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>"
            bos, eos, cls_, sep_, pad, mask = "[CLS]", "[SEP]", "[CLS]", "[SEP]", "<pad>", "[MASK]"
        else:  # deberta-v3: [PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3, [MASK] last
            specials, unk = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"], "[UNK]"
            bos, eos, cls_, sep_, pad, mask = "[CLS]", "[SEP]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"
        tok = Tokenizer(models.Unigram())
        # The pipeline each class builds itself when it reloads tokenizer.json (no precompiled charsmap here).
        if family == "albert":
            tok.normalizer = normalizers.Sequence([
                normalizers.Replace("``", '"'), normalizers.Replace("''", '"'),
                normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
            ])
        elif family == "deberta-v2":
            tok.normalizer = normalizers.Sequence([
                normalizers.Replace(Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
                normalizers.Strip(left=False, right=True),
            ])
        if family == "deberta-v2":
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        else:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.WhitespaceSplit(),
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            ])
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        _build_unigram(tok, 500, specials, unk)
        from tokenizers import AddedToken

        if tok.token_to_id(mask) is None:
            tok.add_special_tokens([AddedToken(mask, lstrip=True, special=True)])
        if cls_ == "<s>":  # fairseq templates: <s> A </s></s> B </s>
            tok.post_processor = processors.TemplateProcessing(
                single=f"{cls_} $A {sep_}", pair=f"{cls_} $A {sep_} {sep_} $B {sep_}",
                special_tokens=[(cls_, tok.token_to_id(cls_)), (sep_, tok.token_to_id(sep_))],
            )
        else:
            tok.post_processor = processors.TemplateProcessing(
                single=f"{cls_}:0 $A:0 {sep_}:0", pair=f"{cls_}:0 $A:0 {sep_}:0 $B:1 {sep_}:1",
                special_tokens=[(cls_, tok.token_to_id(cls_)), (sep_, tok.token_to_id(sep_))],
            )
        kwargs.update(bos_token=bos, eos_token=eos, cls_token=cls_, sep_token=sep_, unk_token=unk,
                      pad_token=pad, mask_token=mask)
        if family == "albert":
            kwargs.update(do_lower_case=True, keep_accents=False)
        if family == "deberta-v2":
            kwargs.update(do_lower_case=False, split_by_punct=False, add_prefix_space=True)
        if family == "camembert":
            kwargs.update(additional_special_tokens=["<s>NOTUSED", "</s>NOTUSED", "<unk>NOTUSED"])
    else:  # pragma: no cover
        raise ValueError(family)

    if model_max_length is not None:
        kwargs["model_max_length"] = model_max_length
    kwargs.update(extra)
    cls = getattr(transformers, fam.tokenizer_class)
    return _save_tokenizer(cls(tokenizer_object=tok, **kwargs), folder, model_max_length)


def _save_tokenizer(wrapped, folder: Path, model_max_length):
    """save_pretrained, then drop model_max_length where the folder should declare none."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(folder)
    if model_max_length is None:
        # Older hub folders (all-mpnet-base-v2 classifiers and many fine-tunes) declare none at all;
        # transformers writes its "no limit" sentinel when none is given, so drop the key as those folders do.
        path = folder / "tokenizer_config.json"
        cfg = json.loads(path.read_text(encoding="utf-8"))
        if cfg.pop("model_max_length", None) is not None:
            path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return wrapped


# --------------------------------------------------------------------------- configs and models

def _special_id(tokenizer, token: str | None) -> int | None:
    return None if token is None else tokenizer.convert_tokens_to_ids(token)


def _config(family: str, tokenizer, **extra):
    """A tiny config of the family, its vocab sized to the tokenizer and its special ids taken from it."""
    import transformers

    vocab = len(tokenizer)
    pad = tokenizer.pad_token_id
    common = {"vocab_size": vocab, "pad_token_id": pad}
    positions = MAX_POSITIONS + (pad + 1 if family in OFFSET_POSITION_FAMILIES else 0)
    bert_like = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
                     "intermediate_size": INTERMEDIATE, "max_position_embeddings": positions}
    if family == "bert":
        cfg = transformers.BertConfig(**common, **bert_like)
    elif family == "electra":
        cfg = transformers.ElectraConfig(**common, **bert_like, embedding_size=HIDDEN)
    elif family == "distilbert":
        cfg = transformers.DistilBertConfig(**common, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS,
                                            hidden_dim=INTERMEDIATE, max_position_embeddings=positions)
    elif family in ("roberta", "xlm-roberta", "camembert"):
        cls = {"roberta": transformers.RobertaConfig, "xlm-roberta": transformers.XLMRobertaConfig,
               "camembert": transformers.CamembertConfig}[family]
        cfg = cls(**common, **bert_like, type_vocab_size=1, bos_token_id=_special_id(tokenizer, tokenizer.cls_token),
                  eos_token_id=_special_id(tokenizer, tokenizer.sep_token))
    elif family == "mpnet":
        cfg = transformers.MPNetConfig(**common, **bert_like, relative_attention_num_buckets=32,
                                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    elif family == "albert":
        cfg = transformers.AlbertConfig(**common, **bert_like, embedding_size=16, bos_token_id=tokenizer.cls_token_id,
                                        eos_token_id=tokenizer.sep_token_id)
    elif family == "deberta-v2":  # deberta-v3 layout: no token types, relative attention, no absolute positions
        cfg = transformers.DebertaV2Config(
            **common, **bert_like, type_vocab_size=0, relative_attention=True, position_biased_input=False,
            max_relative_positions=-1, position_buckets=32, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
            share_att_key=True, hidden_act="gelu",
        )
    elif family == "modernbert":
        cfg = transformers.ModernBertConfig(
            **common, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=INTERMEDIATE, max_position_embeddings=MAX_POSITIONS,
            layer_types=["full_attention", "sliding_attention"], local_attention=16,
            bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
            cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
        )
    elif family in ("qwen2", "qwen3"):
        eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        decoder = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": 2,
                       "intermediate_size": INTERMEDIATE, "max_position_embeddings": MAX_POSITIONS, "tie_word_embeddings": True,
                       "bos_token_id": eot, "eos_token_id": eot}
        if family == "qwen2":
            cfg = transformers.Qwen2Config(**common, **decoder)
        else:
            cfg = transformers.Qwen3Config(**common, **decoder, head_dim=HIDDEN // HEADS)
    elif family == "t5":  # sentence-t5 (T5 v1.0: ReLU); the encoder alone is saved (T5EncoderModel)
        cfg = transformers.T5Config(
            **common, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=INTERMEDIATE, num_layers=LAYERS, num_heads=HEADS,
            relative_attention_num_buckets=8, relative_attention_max_distance=20, feed_forward_proj="relu",
            eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=pad, is_encoder_decoder=False, use_cache=False,
        )
    elif family in ("gemma3", "gemma2", "mistral", "llama"):
        decoder = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "head_dim": HIDDEN // HEADS,
                   "intermediate_size": INTERMEDIATE, "max_position_embeddings": MAX_POSITIONS,
                   "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
        # Windows shorter than the verification texts, so sliding attention is exercised and verified.
        if family == "gemma3":  # EmbeddingGemma: bidirectional attention, one sliding and one full layer, 1 KV head
            cfg = transformers.Gemma3TextConfig(
                **common, **decoder, num_key_value_heads=1, query_pre_attn_scalar=HIDDEN // HEADS, sliding_window=SLIDING_WINDOW,
                layer_types=["sliding_attention", "full_attention"], use_bidirectional_attention=True,
            )
        elif family == "gemma2":  # bge-multilingual-gemma2: causal, soft-capped attention logits, alternating windows
            cfg = transformers.Gemma2Config(
                **common, **decoder, num_key_value_heads=2, query_pre_attn_scalar=HIDDEN // HEADS, sliding_window=SLIDING_WINDOW,
                layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=50.0,
                final_logit_softcapping=30.0,
            )
        elif family == "mistral":  # e5-mistral / SFR-Embedding-Mistral: sliding-window attention
            cfg = transformers.MistralConfig(**common, **decoder, num_key_value_heads=2, sliding_window=SLIDING_WINDOW,
                                             tie_word_embeddings=False)
        else:
            cfg = transformers.LlamaConfig(**common, **decoder, num_key_value_heads=2, tie_word_embeddings=False)
    else:  # pragma: no cover
        raise ValueError(family)
    for key, value in extra.items():
        setattr(cfg, key, value)
    return cfg


HEAD_CLASSES = {
    "base": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "fill-mask": "AutoModelForMaskedLM",
    "text-generation": "AutoModelForCausalLM",
}


# The bare model a family's embedders save, where it is not AutoModel's: sentence-t5 and GTR keep T5's encoder alone.
BASE_CLASSES = {"t5": "T5EncoderModel"}


@dataclass(frozen=True)
class DenseLayer:
    """One sentence-transformers Dense module after pooling."""

    out_features: int
    bias: bool = True
    activation: str = "tanh"  # tanh | identity


def _labelled(labels) -> dict:
    return {
        "num_labels": len(labels),
        "id2label": {i: label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def build_hf_model(folder: Path, family: str, head: str = "base", labels=None, model_max_length: int | str | None = "auto",
                   seed: int = SEED, tokenizer_extra: dict | None = None, config_extra: dict | None = None) -> Path:
    """A transformers folder: tokenizer + AutoModel / AutoModelFor<head> saved with save_pretrained."""
    import torch
    import transformers

    folder = Path(folder)
    tokenizer = build_tokenizer(folder, family, model_max_length=model_max_length, **(tokenizer_extra or {}))
    extra = {**(_labelled(labels) if labels else {}), **(config_extra or {})}
    config = _config(family, tokenizer, **extra)
    torch.manual_seed(seed)
    if head == "base" and family in BASE_CLASSES:
        model = getattr(transformers, BASE_CLASSES[family])(config).eval()
    else:
        model = getattr(transformers, HEAD_CLASSES[head]).from_config(config).eval()
    model.save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------- layouts

def build_sequence_classifier(folder: Path, family: str, labels=LABELS, model_max_length: int | str | None = "auto",
                              **kw) -> Path:
    """XForSequenceClassification with id2label/label2id and architectures, saved with save_pretrained."""
    return build_hf_model(folder, family, "sequence-classification", labels, model_max_length, **kw)


def build_token_classifier(folder: Path, family: str, labels=NER_LABELS, **kw) -> Path:
    return build_hf_model(folder, family, "token-classification", labels, **kw)


def build_question_answering(folder: Path, family: str, **kw) -> Path:
    return build_hf_model(folder, family, "question-answering", None, **kw)


def build_hub_reranker(folder: Path, family: str, **kw) -> Path:
    """An old hub-style reranker (ms-marco-MiniLM, bge-reranker before sentence-transformers 4): a sequence
    classifier with num_labels == 1 and no modules.json."""
    return build_hf_model(folder, family, "sequence-classification", ("LABEL_0",), **kw)


def build_st_embedding(folder: Path, family: str, pooling: str = "mean", normalize: bool = True,
                       dense: int | tuple[DenseLayer, ...] | None = None, prompts: dict | None = None,
                       default_prompt_name: str | None = None, max_seq_length: int = ST_MAX_SEQ_LENGTH,
                       tokenizer_extra: dict | None = None, config_extra: dict | None = None,
                       truncate_dim: int | None = None, seed: int = SEED) -> Path:
    """A sentence-transformers folder written by the installed sentence-transformers:
    Transformer -> Pooling(pooling) [-> Dense ...] [-> Normalize]. `dense`: one Dense(HIDDEN -> dense, tanh),
    or the layers in order; `truncate_dim` is saved in config_sentence_transformers.json, as
    SentenceTransformer(truncate_dim=...).save writes it."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as st_modules

    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="zoo-hf-") as tmp:
        build_hf_model(Path(tmp), family, "base", seed=seed, tokenizer_extra=tokenizer_extra, config_extra=config_extra)
        torch.manual_seed(seed)
        transformer = st_modules.Transformer(tmp, max_seq_length=max_seq_length)
        mods = [transformer, st_modules.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)]
        width = HIDDEN
        for layer in (DenseLayer(dense),) if isinstance(dense, int) else dense or ():
            activation = torch.nn.Tanh() if layer.activation == "tanh" else torch.nn.Identity()
            mods.append(st_modules.Dense(width, layer.out_features, bias=layer.bias, activation_function=activation))
            width = layer.out_features
        if normalize:
            mods.append(st_modules.Normalize())
        model = SentenceTransformer(modules=mods, device="cpu", prompts=prompts, default_prompt_name=default_prompt_name,
                                    truncate_dim=truncate_dim)
        model.save(str(folder))
    return folder


def build_st_legacy(folder: Path, family: str, pooling: str = "mean", seed: int = SEED) -> Path:
    """A sentence-transformers 2.x folder written by hand as those versions did: boolean pooling_mode_* keys,
    an empty 2_Normalize, sentence_bert_config.json and the transformers files at the root."""
    folder = Path(folder)
    build_hf_model(folder, family, "base", seed=seed)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling_cfg = {
        "word_embedding_dimension": HIDDEN,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
    }
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_cfg, indent=2) + "\n")
    (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": ST_MAX_SEQ_LENGTH, "do_lower_case": False}, indent=2) + "\n"
    )
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"__version__": {"sentence_transformers": "2.2.2", "transformers": "4.28.1", "pytorch": "2.0.0"}},
                   indent=2) + "\n"
    )
    return folder


def build_cross_encoder(folder: Path, family: str, max_length: int = ST_MAX_SEQ_LENGTH,
                        tokenizer_extra: dict | None = None, seed: int = SEED) -> Path:
    """A reranker written by the installed sentence-transformers' CrossEncoder.save (num_labels=1)."""
    from sentence_transformers import CrossEncoder

    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="zoo-hf-") as tmp:
        build_hf_model(Path(tmp), family, "sequence-classification", ("LABEL_0",), seed=seed,
                       tokenizer_extra=tokenizer_extra)
        model = CrossEncoder(tmp, num_labels=1, max_length=max_length, device="cpu")
        model.save(str(folder))
    return folder


def _sparsify_mlm(folder: Path, share: float = SPLADE_ACTIVE_SHARE) -> None:
    """A random masked-LM head scores about half the vocabulary above zero at every token, so SPLADE would keep
    nearly every term: lower the head's bias until a `share` of the logits on the corpus stay above zero, so
    each text keeps tens of terms, as a trained SPLADE model keeps a few hundred of 30k."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(folder)).eval()
    batch = tokenizer(CORPUS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits[batch["attention_mask"].bool()]
        model.get_output_embeddings().bias -= torch.quantile(logits.flatten(), 1 - share)
    model.save_pretrained(str(folder))


def build_sparse_encoder(folder: Path, family: str, pooling: str = "max", activation: str = "relu",
                         max_active_dims: int | None = None, prompts: dict | None = None, seed: int = SEED) -> Path:
    """A SPLADE folder written by the installed sentence-transformers' SparseEncoder.save:
    Transformer(transformer_task="fill-mask") -> SpladePooling(pooling, activation), with max_active_dims
    saved in config_sentence_transformers.json where given."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="zoo-hf-") as tmp:
        build_hf_model(Path(tmp), family, "fill-mask", seed=seed)
        _sparsify_mlm(Path(tmp))
        transformer = Transformer(tmp, transformer_task="fill-mask", max_seq_length=ST_MAX_SEQ_LENGTH)
        model = SparseEncoder(modules=[transformer, SpladePooling(pooling, activation)], device="cpu",
                              max_active_dims=max_active_dims, prompts=prompts)
        model.save(str(folder))
    return folder


def build_sparse_legacy(folder: Path, family: str, pooling: str = "sum", seed: int = SEED) -> Path:
    """A SPLADE folder as sentence-transformers 5.0-5.3 saved it, written by hand: MLMTransformer and
    SpladePooling under their sentence_transformers.sparse_encoder.models paths, the transformers files at
    the root, max_seq_length in sentence_bert_config.json."""
    folder = build_hf_model(Path(folder), family, "fill-mask", seed=seed)
    _sparsify_mlm(folder)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": "sentence_transformers.sparse_encoder.models.SpladePooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (folder / "1_SpladePooling").mkdir(exist_ok=True)
    (folder / "1_SpladePooling" / "config.json").write_text(json.dumps(
        {"pooling_strategy": pooling, "activation_function": "relu", "word_embedding_dimension": vocab}, indent=2) + "\n")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": ST_MAX_SEQ_LENGTH, "do_lower_case": False}, indent=2) + "\n")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "SparseEncoder",
        "__version__": {"sentence_transformers": "5.0.0", "transformers": "4.53.0", "pytorch": "2.7.1"},
        "prompts": {"query": "", "document": ""}, "default_prompt_name": None, "similarity_fn_name": "dot",
    }, indent=2) + "\n")
    return folder


MULTI_VECTOR_DIM = 16
MULTI_VECTOR_LAYOUTS = ("sentence-transformers", "pylate", "stanford")


def build_multi_vector(folder: Path, layout: str = "sentence-transformers", family: str = "bert",
                       seed: int = SEED) -> Path:
    """A late-interaction (ColBERT) folder: the encoder, a token-level Dense to MULTI_VECTOR_DIM, normalised.
    sentence-transformers: MultiVectorEncoder(modules=...).save, as the installed library writes it.
    pylate: PyLate 3's layout, written by hand (config_sentence_transformers.json's model_type "ColBERT" and its
    query/document keys, the Dense under pylate.models.Dense). stanford: Stanford ColBERT's checkpoint, written by
    hand (architectures ["HF_ColBERT"], the projection as linear.weight among the encoder's weights,
    artifact.metadata). The installed MultiVectorEncoder reads all three."""
    import torch
    from safetensors.torch import load_file, save_file
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer

    folder = Path(folder)
    base = build_hf_model(folder / "base" if layout == "sentence-transformers" else folder, family, seed=seed)
    torch.manual_seed(seed)
    projection = torch.nn.Linear(HIDDEN, MULTI_VECTOR_DIM, bias=False).weight.detach().clone()
    if layout == "sentence-transformers":
        dense = Dense(HIDDEN, MULTI_VECTOR_DIM, bias=False, activation_function=None, init_weight=projection,
                      module_input_name="token_embeddings")
        modules = [Transformer(str(base)), dense, Normalize(module_input_name="token_embeddings")]
        MultiVectorEncoder(modules=modules, device="cpu").save(str(folder))
        shutil.rmtree(base)
        return folder
    if layout == "pylate":
        (folder / "1_Dense").mkdir(exist_ok=True)
        save_file({"linear.weight": projection.contiguous()}, str(folder / "1_Dense" / "model.safetensors"))
        (folder / "1_Dense" / "config.json").write_text(json.dumps({
            "in_features": HIDDEN, "out_features": MULTI_VECTOR_DIM, "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity"}, indent=2) + "\n")
        (folder / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
        ], indent=2) + "\n")
        (folder / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": 179, "do_lower_case": False}, indent=2) + "\n")
        (folder / "config_sentence_transformers.json").write_text(json.dumps({
            "model_type": "ColBERT", "__version__": {"sentence_transformers": "4.0.2", "pylate": "1.2.0"},
            "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
            "query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 32, "document_length": 180,
            "attend_to_expansion_tokens": False, "skiplist_words": ["!", ",", ".", "?"], "do_query_expansion": True,
        }, indent=2) + "\n")
        return folder
    if layout == "stanford":
        weights = folder / "model.safetensors"
        save_file({**load_file(str(weights)), "linear.weight": projection.contiguous()}, str(weights))
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "architectures": ["HF_ColBERT"]}, indent=2) + "\n")
        (folder / "artifact.metadata").write_text(json.dumps({
            "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": 32, "doc_maxlen": 180,
            "dim": MULTI_VECTOR_DIM, "similarity": "cosine", "attend_to_mask_tokens": False,
            "mask_punctuation": True}, indent=2) + "\n")
        return folder
    raise ValueError(f"unknown multi-vector layout {layout!r}")


# Qwen3-Reranker's prompt as a chat template that renders sentence-transformers' pair roles ("query", "document";
# flat messages) and takes a system message, where a prompt is given, as the instruction.
QWEN3_RERANKER_SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct '
                         'provided. Note that the answer can only be "yes" or "no".')
QWEN3_RERANKER_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_RERANKER_TEMPLATE = (
    "{%- set instruct = namespace(text='" + QWEN3_RERANKER_INSTRUCTION + "') -%}"
    "{%- for m in messages if m.role == 'system' -%}{%- set instruct.text = m.content -%}{%- endfor -%}"
    "<|im_start|>system\n" + QWEN3_RERANKER_SYSTEM.replace("'", "\\'") + "<|im_end|>\n<|im_start|>user\n"
    "<Instruct>: {{ instruct.text }}\n"
    "<Query>: {{ messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first }}\n"
    "<Document>: {{ messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first }}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
# What the reranker's byte-level BPE learns besides the corpus: its prompt (often, so that its words become whole
# tokens and the template leaves room for the pair, as Qwen's vocabulary does), and "yes" and "no" as tokens.
RERANKER_CORPUS = (QWEN3_RERANKER_SYSTEM, QWEN3_RERANKER_INSTRUCTION,
                   "user\n<Instruct>: <Query>: <Document>: assistant\n<think>\n\n</think>\n\n") * 12 + ("yes\nno",) * 8
RERANKER_POSITIONS = 512  # the reranker's positions: room for the template, the pair and the long verification pairs
RERANKER_MAX_LENGTH = 256  # what it declares: the long verification documents are cut, and the template restored
RERANKER_HEAD_SCALE = 5.0  # the "yes"/"no" rows of a random tied LM head, scaled so scores differ clearly between pairs


def build_llm_reranker(folder: Path, family: str = "qwen3", max_length: int = RERANKER_MAX_LENGTH,
                       prompts: dict | None = None, default_prompt_name: str | None = None,
                       activation: str = "sigmoid", tied: bool = True, seed: int = SEED) -> Path:
    """A Qwen3-Reranker-like causal LM written by the installed sentence-transformers' CrossEncoder.save, which
    loads a *ForCausalLM folder as Transformer(text-generation) -> LogitScore("yes", "no"): the chat template
    in the folder, left padding, the CrossEncoder's sigmoid (or, with activation="identity", the raw score).
    tied=False gives the LM head its own weights, as larger rerankers have them."""
    import torch
    import transformers
    from sentence_transformers import CrossEncoder

    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="zoo-hf-") as tmp:
        tokenizer = build_tokenizer(Path(tmp), family, extra_corpus=RERANKER_CORPUS, padding_side="left",
                                    chat_template=QWEN3_RERANKER_TEMPLATE)
        torch.manual_seed(seed)
        config = _config(family, tokenizer, max_position_embeddings=RERANKER_POSITIONS, tie_word_embeddings=tied)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            for token in ("yes", "no"):
                model.get_output_embeddings().weight[tokenizer.convert_tokens_to_ids(token)] *= RERANKER_HEAD_SCALE
        model.save_pretrained(tmp)
        reranker = CrossEncoder(tmp, max_length=max_length, device="cpu", prompts=prompts,
                                default_prompt_name=default_prompt_name,
                                activation_fn=torch.nn.Identity() if activation == "identity" else None)
        reranker.save(str(folder))
    return folder


# --------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class ZooEntry:
    id: str
    family: str
    task: str  # embedding | sparse-embedding | classification | reranker | token-classification | question-answering
    # st | st-legacy | st-cls | st-dense | st-prompts | st-lasttoken | st-sparse | st-sparse-legacy | hf |
    # st-cross-encoder | st-llm-reranker | hf-reranker
    layout: str
    builder: Callable[[Path], Path] = field(compare=False, repr=False)
    notes: str = ""


ENCODERS = ["bert", "distilbert", "roberta", "xlm-roberta", "camembert", "mpnet", "deberta-v2", "electra", "albert",
            "modernbert"]
# Decoder families (scorers: the model's own last-token classification head).
DECODERS = ["qwen2", "qwen3", "mistral", "llama", "gemma2", "gemma3"]
QWEN3_EMBEDDING_PROMPTS = {
    "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
    "document": "",
}

# google/embeddinggemma-300m declares these (and more task prompts) in config_sentence_transformers.json.
EMBEDDINGGEMMA_PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "Clustering": "task: clustering | query: ",
    "STS": "task: sentence similarity | query: ",
}
# EmbeddingGemma's head: mean pooling, Dense(768 -> 3072) and Dense(3072 -> 768), both without bias or activation.
EMBEDDINGGEMMA_DENSE = (DenseLayer(4 * HIDDEN, bias=False, activation="identity"),
                        DenseLayer(HIDDEN, bias=False, activation="identity"))
E5_MISTRAL_PROMPTS = {
    "web_search_query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: ",
    "sts_query": "Instruct: Retrieve semantically similar text.\nQuery: ",
}


def _entries() -> list[ZooEntry]:
    e: list[ZooEntry] = []
    for fam in ENCODERS:
        e.append(ZooEntry(f"{fam}-st-mean", fam, "embedding", "st",
                          partial(build_st_embedding, family=fam, pooling="mean"), "mean + Normalize"))
    e += [
        ZooEntry("bert-st-legacy", "bert", "embedding", "st-legacy", partial(build_st_legacy, family="bert"),
                 "hand-written 2.x layout, boolean pooling_mode_mean_tokens"),
        ZooEntry("mpnet-st-legacy", "mpnet", "embedding", "st-legacy", partial(build_st_legacy, family="mpnet"),
                 "all-mpnet-base-v2-like 2.x layout"),
        ZooEntry("bert-st-cls", "bert", "embedding", "st-cls",
                 partial(build_st_embedding, family="bert", pooling="cls"), "bge-like CLS + Normalize"),
        ZooEntry("xlm-roberta-st-cls", "xlm-roberta", "embedding", "st-cls",
                 partial(build_st_embedding, family="xlm-roberta", pooling="cls"), "bge-m3-like CLS + Normalize"),
        ZooEntry("bert-st-dense", "bert", "embedding", "st-dense",
                 partial(build_st_embedding, family="bert", pooling="cls", dense=16),
                 "LaBSE-like CLS -> Dense(32->16, tanh) -> Normalize"),
        ZooEntry("xlm-roberta-st-prompts", "xlm-roberta", "embedding", "st-prompts",
                 partial(build_st_embedding, family="xlm-roberta", pooling="mean",
                         prompts={"query": "query: ", "passage": "passage: "}),
                 "multilingual-e5-like prompts, no default prompt"),
        ZooEntry("qwen2-st-lasttoken", "qwen2", "embedding", "st-lasttoken",
                 partial(build_st_embedding, family="qwen2", pooling="lasttoken"),
                 "last-token pooling, right padding, no EOS appended"),
        ZooEntry("qwen3-st-lasttoken", "qwen3", "embedding", "st-lasttoken",
                 partial(build_st_embedding, family="qwen3", pooling="lasttoken", prompts=QWEN3_EMBEDDING_PROMPTS,
                         tokenizer_extra={"padding_side": "left"}),
                 "Qwen3-Embedding-like: left padding, <|endoftext|> appended, query prompt"),
        ZooEntry("t5-st-mean-dense", "t5", "embedding", "st-dense",
                 partial(build_st_embedding, family="t5", pooling="mean",
                         dense=(DenseLayer(HIDDEN, bias=False, activation="identity"),)),
                 "sentence-t5-like: T5EncoderModel, mean -> Dense(32->32, no bias) -> Normalize"),
        ZooEntry("gemma3-st-embeddinggemma", "gemma3", "embedding", "st-dense",
                 partial(build_st_embedding, family="gemma3", pooling="mean", dense=EMBEDDINGGEMMA_DENSE,
                         prompts=EMBEDDINGGEMMA_PROMPTS, tokenizer_extra={"padding_side": "right"}),
                 "EmbeddingGemma-like: bidirectional attention with a sliding window, mean -> Dense(32->128) -> "
                 "Dense(128->32) -> Normalize, <bos> and <eos>, task prompts"),
        ZooEntry("gemma3-st-truncate-dim", "gemma3", "embedding", "st-dense",
                 partial(build_st_embedding, family="gemma3", pooling="mean", dense=EMBEDDINGGEMMA_DENSE,
                         truncate_dim=HIDDEN // 2),
                 "EmbeddingGemma saved with truncate_dim=16: encode returns the first 16 values"),
        ZooEntry("gemma2-st-lasttoken", "gemma2", "embedding", "st-lasttoken",
                 partial(build_st_embedding, family="gemma2", pooling="lasttoken",
                         tokenizer_extra={"padding_side": "left"}),
                 "bge-multilingual-gemma2-like: causal, soft-capped attention, sliding window, left padding"),
        ZooEntry("mistral-st-lasttoken", "mistral", "embedding", "st-lasttoken",
                 partial(build_st_embedding, family="mistral", pooling="lasttoken", prompts=E5_MISTRAL_PROMPTS,
                         tokenizer_extra={"padding_side": "right"}),
                 "e5-mistral-like: sliding window, </s> appended, right padding, instruction prompts"),
        ZooEntry("llama-st-lasttoken", "llama", "embedding", "st-lasttoken",
                 partial(build_st_embedding, family="llama", pooling="lasttoken",
                         tokenizer_extra={"padding_side": "left"}),
                 "Llama backbone, last-token pooling, left padding, no </s> appended"),
    ]
    for fam in ENCODERS + DECODERS:
        e.append(ZooEntry(f"{fam}-seq-cls", fam, "classification", "hf",
                          partial(build_sequence_classifier, family=fam), "3 labels"))
    for fam in ["bert", "xlm-roberta"]:
        e.append(ZooEntry(f"{fam}-seq-cls-multilabel", fam, "classification", "hf",
                          partial(build_sequence_classifier, family=fam,
                                  config_extra={"problem_type": "multi_label_classification"}),
                          "toxicity-like: problem_type multi_label_classification, a sigmoid per label"))
    e.append(ZooEntry("mpnet-seq-cls-nomaxlen", "mpnet", "classification", "hf",
                      partial(build_sequence_classifier, family="mpnet", model_max_length=None),
                      "tokenizer_config.json declares no model_max_length"))
    for fam in ["bert", "roberta", "xlm-roberta", "electra", "deberta-v2", "modernbert"]:
        e.append(ZooEntry(f"{fam}-cross-encoder", fam, "reranker", "st-cross-encoder",
                          partial(build_cross_encoder, family=fam), "CrossEncoder.save, num_labels=1"))
    e.append(ZooEntry("qwen3-cross-encoder", "qwen3", "reranker", "st-cross-encoder",
                      partial(build_cross_encoder, family="qwen3", tokenizer_extra={"padding_side": "left"}),
                      "Qwen3-Reranker-seq-cls-like, left padding"))
    e += [
        ZooEntry("qwen3-llm-reranker", "qwen3", "reranker", "st-llm-reranker", partial(build_llm_reranker, family="qwen3"),
                 "Qwen3-Reranker-like: Transformer(text-generation) -> LogitScore(yes, no), chat template, left padding"),
        ZooEntry("qwen3-llm-reranker-prompt", "qwen3", "reranker", "st-llm-reranker",
                 partial(build_llm_reranker, family="qwen3", prompts={"code": "Given a code question, retrieve code"},
                         default_prompt_name="code", activation="identity"),
                 "a default prompt rendered as the template's instruction, no activation (raw yes - no logit)"),
    ]
    for fam in ["bert", "xlm-roberta"]:
        e.append(ZooEntry(f"{fam}-hub-reranker", fam, "reranker", "hf-reranker",
                          partial(build_hub_reranker, family=fam), "num_labels=1, no modules.json"))
    e += [
        ZooEntry("bert-splade", "bert", "sparse-embedding", "st-sparse", partial(build_sparse_encoder, family="bert"),
                 "SPLADE-v3-like: Transformer(fill-mask) -> SpladePooling(max, relu)"),
        ZooEntry("distilbert-splade-log1p", "distilbert", "sparse-embedding", "st-sparse",
                 partial(build_sparse_encoder, family="distilbert", activation="log1p_relu", max_active_dims=12),
                 "opensearch-neural-sparse-like: SpladePooling(max, log1p_relu), max_active_dims 12"),
        ZooEntry("bert-splade-legacy", "bert", "sparse-embedding", "st-sparse-legacy",
                 partial(build_sparse_legacy, family="bert"),
                 "sentence-transformers 5.0 layout: MLMTransformer -> SpladePooling(sum), written by hand"),
    ]
    for fam in ENCODERS:
        e.append(ZooEntry(f"{fam}-token-cls", fam, "token-classification", "hf",
                          partial(build_token_classifier, family=fam), "O/B-PER/I-PER/B-LOC/I-LOC"))
    for fam in ENCODERS:
        e.append(ZooEntry(f"{fam}-qa", fam, "question-answering", "hf",
                          partial(build_question_answering, family=fam), "extractive QA"))
    return e


ZOO: list[ZooEntry] = _entries()
BY_ID: dict[str, ZooEntry] = {entry.id: entry for entry in ZOO}
assert len(BY_ID) == len(ZOO), "duplicate zoo ids"


def build(entry: ZooEntry | str, root: Path) -> Path:
    """Build `entry` into root/<id> and return that folder."""
    entry = BY_ID[entry] if isinstance(entry, str) else entry
    return entry.builder(Path(root) / entry.id)


# --------------------------------------------------------------------------- check

BAD_LOAD_MESSAGES = ("newly initialized", "were not initialized", "MISSING", "UNEXPECTED", "MISMATCH",
                     "not used when initializing")


@contextlib.contextmanager
def _captured_transformers_log():
    """Everything transformers logs (warnings included) while loading."""
    from transformers.utils import logging as hf_logging

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    logger = hf_logging.get_logger("transformers")
    previous = logger.level
    logger.addHandler(handler)
    hf_logging.set_verbosity_warning()
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _assert_clean_load(log: str, what: str) -> None:
    bad = [line for line in log.splitlines() if any(m in line for m in BAD_LOAD_MESSAGES)]
    assert not bad, f"{what}: loading reported uninitialised/unexpected weights: {bad[:3]}"


def _transformer_dir(folder: Path) -> Path:
    modules = folder / "modules.json"
    if modules.is_file():
        for module in json.loads(modules.read_text()):
            if module.get("type", "").rsplit(".", 1)[-1] == "Transformer":
                return folder / module.get("path", "")
    return folder


def _check_tokenizer(family: str, tdir: Path) -> None:
    """AutoTokenizer loads the family's class, agrees with the raw tokenizer.json, and places special tokens right."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    fam = FAMILIES[family]
    tok = AutoTokenizer.from_pretrained(str(tdir))
    assert tok.is_fast, f"{tdir}: not a fast tokenizer"
    cfg = json.loads((tdir / "tokenizer_config.json").read_text())
    expected = fam.written_tokenizer_class
    declared = cfg.get("tokenizer_class")
    assert declared in (expected, expected + "Fast"), f"{tdir}: tokenizer_class {declared!r}, expected {expected}"
    raw = Tokenizer.from_file(str(tdir / "tokenizer.json"))
    raw.no_padding()
    raw.no_truncation()
    for text in CORPUS[:12]:
        ids_hf = tok(text)["input_ids"]
        ids_raw = raw.encode(text).ids
        assert ids_hf == ids_raw, f"{tdir}: transformers and tokenizer.json disagree on {text!r}: {ids_hf} vs {ids_raw}"
    a, b = "hello world", "the dog"
    pair_hf = tok(a, b)["input_ids"]
    assert pair_hf == raw.encode(a, b).ids, f"{tdir}: pair encoding differs from tokenizer.json"
    parts = {"A": tok(a, add_special_tokens=False)["input_ids"], "B": tok(b, add_special_tokens=False)["input_ids"]}
    for template, got in ((fam.single, tok(a)["input_ids"]), (fam.pair, pair_hf)):
        want: list[int] = []
        for item in template:
            want += parts.get(item) or [tok.convert_tokens_to_ids(item)]
        assert got == want, f"{tdir}: {tok.convert_ids_to_tokens(got)}, expected template {list(template)}"
    unk = tok.unk_token_id
    if unk is not None:
        n_unk = sum(i == unk for i in raw.encode(" ".join(CORPUS)).ids)
        assert n_unk <= 3, f"{tdir}: {n_unk} unknown tokens on the corpus"


def check(entry: ZooEntry | str, folder: Path) -> None:
    """Load a built folder back with the library that saved it; raise AssertionError on any problem."""
    import torch
    import transformers

    entry = BY_ID[entry] if isinstance(entry, str) else entry
    folder = Path(folder)
    tdir = _transformer_dir(folder)
    _check_tokenizer(entry.family, tdir)
    config = json.loads((tdir / "config.json").read_text())
    assert config["model_type"] == FAMILIES[entry.family].model_type, config["model_type"]
    sentences = ["hello world", "The quick brown fox jumps over the lazy dog."]

    if entry.layout.startswith("st") and entry.task == "embedding":
        from sentence_transformers import SentenceTransformer

        with _captured_transformers_log() as log:
            model = SentenceTransformer(str(folder), device="cpu")
        _assert_clean_load(log.getvalue(), entry.id)
        emb = model.encode(sentences, convert_to_numpy=True)
        assert emb.shape[0] == 2 and emb.shape[1] in (HIDDEN, 16), emb.shape
        assert (abs(emb).sum(1) > 0).all()
        if entry.layout != "st-dense":
            assert emb.shape[1] == HIDDEN
        return

    if entry.layout.startswith("st-sparse"):
        from sentence_transformers import SparseEncoder

        with _captured_transformers_log() as log:
            model = SparseEncoder(str(folder), device="cpu")
        _assert_clean_load(log.getvalue(), entry.id)
        emb = model.encode(sentences, convert_to_sparse_tensor=False).numpy()
        assert emb.shape == (2, config["vocab_size"]), emb.shape
        active = (emb > 0).sum(1)
        assert (active > 0).all() and (active < config["vocab_size"] // 4).all(), active  # sparse, not empty
        return

    if entry.layout in ("st-cross-encoder", "st-llm-reranker"):
        from sentence_transformers import CrossEncoder

        with _captured_transformers_log() as log:
            model = CrossEncoder(str(folder), device="cpu")
        _assert_clean_load(log.getvalue(), entry.id)
        scores = model.predict([("what is triton", "Triton serves raw strings."), ("hello", "the dog")])
        assert len(scores) == 2
        return

    head = {"classification": "sequence-classification", "reranker": "sequence-classification",
            "token-classification": "token-classification", "question-answering": "question-answering"}[entry.task]
    assert not (folder / "modules.json").exists(), f"{folder}: unexpected modules.json"
    auto = getattr(transformers, HEAD_CLASSES[head])
    with _captured_transformers_log() as log:
        model, info = auto.from_pretrained(str(folder), output_loading_info=True)
    _assert_clean_load(log.getvalue(), entry.id)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(key), f"{entry.id}: {key} {info.get(key)}"
    assert config.get("architectures") == [type(model).__name__], config.get("architectures")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    if tok.pad_token is None:  # pragma: no cover - every zoo tokenizer has one
        raise AssertionError(f"{entry.id}: tokenizer has no pad token")
    batch = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.eval()(**batch)
    if head == "question-answering":
        assert out.start_logits.shape == batch["input_ids"].shape
    elif head == "token-classification":
        assert out.logits.shape[-1] == len(NER_LABELS)
        assert [config["id2label"][str(i)] for i in range(len(NER_LABELS))] == list(NER_LABELS)
    else:
        n = 1 if entry.task == "reranker" else len(LABELS)
        assert out.logits.shape == (2, n), out.logits.shape
        if entry.task == "classification":
            assert [config["id2label"][str(i)] for i in range(n)] == list(LABELS)


def build_all(root: Path, ids: list[str] | None = None, verify: bool = True) -> dict[str, Path]:
    """Build (and check) every entry, or those in `ids`, under `root`."""
    built = {}
    for entry in ZOO if not ids else [BY_ID[i] for i in ids]:
        built[entry.id] = folder = build(entry, root)
        if verify:
            check(entry, folder)
    return built


if __name__ == "__main__":  # pragma: no cover - a manual tool
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: python tests/support/model_zoo.py ROOT [ID ...]\n" + "\n".join(
            f"  {e.id:28} {e.family:12} {e.task:22} {e.layout}" for e in ZOO))
    for name, path in build_all(Path(sys.argv[1]), sys.argv[2:] or None).items():
        print(f"{name:28} {path}")


# -- image and text: CLIP and SigLIP ---------------------------------------------------------------------------
IMAGE_TEXT_SIZE = 30  # the towers' input pixels (patches of 10): tiny, and a real resize and crop of every image


def _clip_tokenizer(model_max_length: int):
    """CLIP's own tokenizer class over a tiny byte-level vocabulary (letters and their word ends, a few merges)."""
    import transformers

    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab: dict[str, int] = {}
    for c in letters:
        vocab[c] = len(vocab)
    for c in letters:
        vocab[c + "</w>"] = len(vocab)
    merges = [("t", "h"), ("th", "e</w>"), ("a", "t</w>"), ("i", "n"), ("o", "n</w>")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    for special in ("<|startoftext|>", "<|endoftext|>"):
        vocab[special] = len(vocab)
    return transformers.CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=model_max_length)


def _siglip_tokenizer(model_max_length: int):
    """A SigLIP-like tokenizer built locally with the tokenizers library (SigLIP's own, SiglipTokenizer, is
    SentencePiece only, which tritonize refuses): a Unigram over a few words and the letters, lower-cased, "▁" for
    spaces, `</s>` after each text and as padding, as SigLIP's."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    words = ["the", "cat", "a", "photo", "of", "thin", "on", "at", "in", "dog"]
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [("▁" + w, -2.0) for w in words]
    vocab += [(c, -5.0) for c in letters] + [("▁" + c, -4.0) for c in letters] + [("▁", -3.0)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(" ", "▁"),
                                           normalizers.Prepend("▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="</s>", eos_token="</s>",
                                                unk_token="<unk>", model_max_length=model_max_length)


def build_image_text(folder: Path, family: str = "clip", sentence_transformers: bool = False,
                     normalize: bool = False, vit_b32: bool = False) -> Path:
    """A tiny random CLIPModel or SiglipModel with its processor (image processor and tokenizer), saved as the
    installed transformers saves it; `sentence_transformers`: wrapped in sentence-transformers' Transformer module
    (and a Normalize), saved as the installed sentence-transformers saves it. `vit_b32`: a CLIP of the real ViT-B/32
    sizes instead (CLIPConfig's defaults: vision 768 wide, 12 layers, patches of 32 on 224 pixels; text 512 wide,
    12 layers, 77 tokens) with random weights and CLIPImageProcessor's defaults, for the bench: what its towers
    cost, not what they answer."""
    import torch
    import transformers

    torch.manual_seed(0)
    folder = Path(folder)
    tower = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2)
    if vit_b32:
        if family != "clip" or sentence_transformers:
            raise ValueError("vit_b32 builds a transformers CLIP")
        tok = _clip_tokenizer(77)
        ids = dict(eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)
        model = transformers.CLIPModel(transformers.CLIPConfig(text_config=ids))
        processor = transformers.CLIPProcessor(image_processor=transformers.CLIPImageProcessor(), tokenizer=tok)
    elif family == "clip":
        max_length = 16
        tok = _clip_tokenizer(max_length)
        config = transformers.CLIPConfig(
            text_config=dict(tower, vocab_size=len(tok), max_position_embeddings=max_length,
                             eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id),
            vision_config=dict(tower, image_size=IMAGE_TEXT_SIZE, patch_size=10), projection_dim=24)
        model = transformers.CLIPModel(config)
        images = transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE_TEXT_SIZE},
                                                 crop_size={"height": IMAGE_TEXT_SIZE, "width": IMAGE_TEXT_SIZE})
        processor = transformers.CLIPProcessor(image_processor=images, tokenizer=tok)
    elif family == "siglip":  # SigLIP's towers share the hidden width: its text head projects to it, its vision none
        max_length = 16
        tok = _siglip_tokenizer(max_length)
        config = transformers.SiglipConfig(
            text_config=dict(tower, vocab_size=len(tok), max_position_embeddings=max_length, projection_size=32,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None),
            vision_config=dict(tower, image_size=IMAGE_TEXT_SIZE, patch_size=10))
        model = transformers.SiglipModel(config)
        images = transformers.SiglipImageProcessor(size={"height": IMAGE_TEXT_SIZE, "width": IMAGE_TEXT_SIZE})
        processor = transformers.SiglipProcessor(image_processor=images, tokenizer=tok)
    else:
        raise ValueError(family)
    raw = folder / "transformers" if sentence_transformers else folder
    model.eval().save_pretrained(raw)
    processor.save_pretrained(raw)
    if not sentence_transformers:
        return folder
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer

    modules = [Transformer(str(raw))] + ([Normalize()] if normalize else [])
    SentenceTransformer(modules=modules, device="cpu").save(str(folder / "st"))
    return folder / "st"
