"""`python generate.py` as a user runs it: files, options from YAML, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support.cli import run_generate
from support.tiny_models import build_classifier, build_embedding_model
from tritonize.repository import parse_config


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("models")
    return {"emb": build_embedding_model(base / "tiny-emb"), "cls": build_classifier(base / "tiny-cls")}


def test_generate_writes_a_verified_repository(models, tmp_path: Path) -> None:
    out = tmp_path / "repo"
    result = run_generate("--model", str(models["cls"]), "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "Exporting to ONNX" in result.stderr and "Repository ready" in result.stderr  # progress is shown
    name = "tiny-cls"  # its tokenizer is BERT's WordPiece: the default layout, graphs with no Python
    for rel in (f"{name}/config.pbtxt", f"{name}_tokenizer/1/texts.onnx", f"{name}_tokenizer/1/tokenizer.json",
                f"{name}_model/1/model_text.onnx", f"{name}_model/1/model.onnx", f"{name}_model/labels.txt",
                f"{name}_model/libortextensions.so"):
        assert (out / rel).is_file(), rel
    assert not list(out.rglob("*.py"))
    for config in out.rglob("*.pbtxt"):
        parse_config(config.read_text(), str(config))
    report = json.loads((out / "verification.json").read_text())
    assert report["passed"] is True and report["stages"]["export"]["argmax_agreement"] == 1.0
    manifest = yaml.safe_load((out / "tritonize.yaml").read_text())
    assert manifest["task"] == "classification" and manifest["name"] == name


def test_yaml_options_with_flags_winning_and_regeneration_is_diffable(models, tmp_path: Path) -> None:
    cfg = tmp_path / "opts.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": str(models["emb"]), "name": "fromyaml", "max_batch_size": 8, "max_queue_delay_us": 300,
        "model_instances": 2, "output": str(tmp_path / "a"),
    }))
    result = run_generate("--config", str(cfg), "--max-queue-delay-us", "700")
    assert result.returncode == 0, result.stderr
    model = parse_config((tmp_path / "a/fromyaml_model/config.pbtxt").read_text())
    assert model.max_batch_size == 8 and model.instance_group[0].count == 2
    assert model.dynamic_batching.max_queue_delay_microseconds == 700  # the flag beats the file
    # The written tritonize.yaml regenerates the same configs.
    again = run_generate("--config", str(tmp_path / "a/tritonize.yaml"), "--output", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    for config in (tmp_path / "a").rglob("*.pbtxt"):
        twin = tmp_path / "b" / config.relative_to(tmp_path / "a")
        assert twin.read_text() == config.read_text()


def test_device_gpu_writes_fp16_fused_verified_and_its_manifest_regenerates_it(models, tmp_path: Path) -> None:
    """On this CPU machine: the GPU optimizer's fusions and fp16 export here, and the fp16 graph is verified on
    the CPU against sentence-transformers, held to --min-cosine-fp16."""
    import onnx

    out = tmp_path / "gpu"
    result = run_generate("--model", str(models["emb"]), "--device", "gpu", "--output", str(out), "--name", "g")
    assert result.returncode == 0, result.stderr
    manifest = yaml.safe_load((out / "tritonize.yaml").read_text())
    assert (manifest["precision"], manifest["optimize"], manifest["max_batch_size"]) == ("fp16", True, 256)
    stages = json.loads((out / "verification.json").read_text())["stages"]
    assert set(stages) == {"export", "optimize"}  # the served graph is the fused one
    assert stages["optimize"]["precision"] == "fp16" and stages["optimize"]["metric"] == "min_cosine"
    assert stages["optimize"]["threshold"] == 0.999 and stages["optimize"]["min_cosine"] >= 0.999
    graph = onnx.load(str(out / "g_model/1/model.onnx")).graph
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer)
    assert {"Attention", "SkipLayerNormalization"} <= {n.op_type for n in graph.node if n.domain == "com.microsoft"}
    model = parse_config((out / "g_model/config.pbtxt").read_text())
    assert model.max_batch_size == 256 and model.instance_group[0].kind == model.instance_group[0].KIND_GPU
    again = run_generate("--config", str(out / "tritonize.yaml"), "--output", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    for config in out.rglob("*.pbtxt"):
        assert (tmp_path / "again" / config.relative_to(out)).read_text() == config.read_text()
    assert yaml.safe_load((tmp_path / "again/tritonize.yaml").read_text())["precision"] == "fp16"


def test_flags_win_over_the_gpu_defaults(models, tmp_path: Path) -> None:
    out = tmp_path / "gpu32"
    result = run_generate("--model", str(models["emb"]), "--device", "gpu", "--precision", "fp32", "--no-optimize",
                          "--max-batch-size", "32", "--output", str(out), "--name", "g")
    assert result.returncode == 0, result.stderr
    manifest = yaml.safe_load((out / "tritonize.yaml").read_text())
    assert (manifest["precision"], manifest["optimize"], manifest["max_batch_size"]) == ("fp32", False, 32)
    assert set(json.loads((out / "verification.json").read_text())["stages"]) == {"export"}
    assert parse_config((out / "g_model/config.pbtxt").read_text()).max_batch_size == 32


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--model", "/no/such/folder"], "error: model folder /no/such/folder does not exist"),
        ([], "error: no model given"),
        (["--model", "{emb}", "--task", "embedding", "--max-length", "100000"], "error: --max-length 100000 is outside"),
        (["--model", "{emb}", "--tensorrt"], "error: --tensorrt needs --device gpu"),
        (["--model", "{emb}", "--matryoshka-dims", "16,64"], "error: --matryoshka-dims 64: this model serves 32-value"),
        (["--model", "{emb}", "--output", "{foreign}"], "exists and was not written by tritonize"),
        (["--config", "{badyaml}"], "error: unknown option(s) in"),
    ],
)
def test_bad_input_is_one_line_without_traceback(models, tmp_path: Path, args: list[str], expected: str) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    badyaml = tmp_path / "bad.yaml"
    badyaml.write_text("model: x\nmax_batch: 4\n")
    args = [a.format(emb=models["emb"], foreign=foreign, badyaml=badyaml) for a in args]
    result = run_generate(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert (foreign / "notes.txt").read_text() == "mine"


def test_argparse_rejects_unknown_choices(models) -> None:
    result = run_generate("--model", str(models["emb"]), "--device", "tpu")
    assert result.returncode == 2 and "invalid choice" in result.stderr
