"""The model step's GPU defaults on paper (no GPU here): the rendered GPU + TensorRT config parses into Triton's
ModelConfig and gives the TensorRT accelerator one optimization profile over every model input, in the format the
r24.10 onnxruntime backend hands onnxruntime as written ("name:BxT,name:BxT", the TensorRT provider's
ParseProfileShapes), its precision the repository's, and only keys that backend passes on; CPU configs carry no
TensorRT block; every production config warms each bucket up.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from support.specs import EMBEDDING, PASSED
from tritonize import repository
from tritonize.spec import TENSORRT_CACHE, ModelSpec
from tritonize.spec.options import GenerateOptions

BERT = dataclasses.replace(EMBEDDING, input_names=("input_ids", "attention_mask", "token_type_ids"))
MINILM_LIKE = dataclasses.replace(BERT, input_names=("input_ids", "attention_mask"))  # as the MiniLM export takes
PROFILE_KEYS = ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")
# onnxruntime's TensorRT provider reads "input:dimxdim,input:dimxdim" (a name repeated starts another profile).
PROFILE_FORMAT = re.compile(r"^[A-Za-z_][\w.]*:\d+(x\d+)*(,[A-Za-z_][\w.]*:\d+(x\d+)*)*$")


def _model_config(model: ModelSpec = BERT, **options) -> tuple[repository.RepoSpec, mc.ModelConfig]:
    opts = GenerateOptions(model="/models/x", **{"tokenizer": "python", **options})
    repo = repository.plan(opts, model, "demo")
    configs = repository.validate(repository.render(repo, repository.manifest(opts, repo), PASSED))
    return repo, configs["demo_model/config.pbtxt"]


def _profiles(config: mc.ModelConfig) -> dict[str, dict[str, tuple[int, ...]]]:
    """trt_profile_{min,opt,max}_shapes -> input -> shape, parsed as onnxruntime parses them."""
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt"
    out = {}
    for key in PROFILE_KEYS:
        value = accelerator.parameters[key]
        assert PROFILE_FORMAT.match(value), value
        pairs = [item.split(":") for item in value.split(",")]
        names = [name for name, _ in pairs]
        assert len(names) == len(set(names)), f"{key}: one profile, each input once"
        out[key] = {name: tuple(int(d) for d in dims.split("x")) for name, dims in pairs}
    return out


@pytest.mark.parametrize("model", [BERT, MINILM_LIKE], ids=["with-token-type-ids", "ids-and-mask"])
@pytest.mark.parametrize("max_batch_size, buckets", [(64, None), (16, [8, 64]), (1, [256])])
def test_tensorrt_profile_covers_every_input_from_one_row_to_a_full_batch(model, max_batch_size, buckets) -> None:
    repo, config = _model_config(model, device="gpu", tensorrt=True, precision="fp16",
                                 max_batch_size=max_batch_size, buckets=buckets)
    profiles = _profiles(config)
    inputs = [i.name for i in config.input]
    assert inputs == list(model.input_names)
    for key in PROFILE_KEYS:
        assert list(profiles[key]) == inputs  # every input the graph takes, token_type_ids too where it does
        assert len(set(profiles[key].values())) == 1  # rows and tokens agree across inputs
    shape = {key: profiles[key][inputs[0]] for key in PROFILE_KEYS}
    lo, opt, hi = (shape[k] for k in PROFILE_KEYS)
    assert lo == (1, 1)  # a lone row of any length, also from a client that calls the step directly
    assert hi == (config.max_batch_size, max(repo.buckets)) == (max_batch_size, BERT.max_length)
    assert opt[0] == config.max_batch_size and opt[1] in repo.buckets  # a full batch of a bucket
    assert all(a <= b <= c for a, b, c in zip(lo, opt, hi))
    accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accelerator.parameters["precision_mode"] == "FP16"
    assert accelerator.parameters["trt_engine_cache_enable"] == "1"
    assert accelerator.parameters["trt_engine_cache_path"] == TENSORRT_CACHE


def test_default_profile_strings() -> None:
    """MiniLM's GPU defaults (max length 256, buckets 16..256, 256 rows, fp16): the strings the backend passes on."""
    _, config = _model_config(MINILM_LIKE, device="gpu", tensorrt=True)
    assert config.max_batch_size == 256
    parameters = config.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters
    assert parameters["trt_profile_min_shapes"] == "input_ids:1x1,attention_mask:1x1"
    assert parameters["trt_profile_opt_shapes"] == "input_ids:256x64,attention_mask:256x64"
    assert parameters["trt_profile_max_shapes"] == "input_ids:256x256,attention_mask:256x256"
    assert parameters["precision_mode"] == "FP16" and parameters["trt_layer_norm_fp32_fallback"] == "1"


@pytest.mark.parametrize("precision, mode, fallback",
                         [(None, "FP16", "1"), ("fp16", "FP16", "1"), ("fp32", "FP32", None)],
                         ids=["default", "fp16", "fp32"])
def test_precision_mode_follows_the_precision_and_fp16_keeps_layer_norm_in_fp32(precision, mode, fallback) -> None:
    """The layer-norm fallback only where TensorRT runs fp16: in FP32 it has nothing to keep."""
    _, config = _model_config(MINILM_LIKE, device="gpu", tensorrt=True, precision=precision)
    parameters = config.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters
    assert parameters["precision_mode"] == mode
    assert parameters.get("trt_layer_norm_fp32_fallback") == fallback


# Every key the r24.10 onnxruntime backend passes to the TensorRT provider; any other fails the model's load
# ("unknown parameter ... is provided for TensorRT Execution Accelerator"). Read from the release's
# src/onnxruntime.cc, lines 454-668 (onnxruntime_backend r24.10, commit 17e5cb23).
R24_10_TENSORRT_KEYS = frozenset({
    "precision_mode", "max_workspace_size_bytes", "trt_max_partition_iterations", "trt_min_subgraph_size",
    "int8_calibration_table_name", "int8_use_native_calibration_table", "trt_dla_enable", "trt_dla_core",
    "trt_engine_cache_enable", "trt_engine_cache_path", "trt_engine_cache_prefix", "trt_dump_subgraphs",
    "trt_force_sequential_engine_build", "trt_context_memory_sharing_enable", "trt_layer_norm_fp32_fallback",
    "trt_timing_cache_enable", "trt_timing_cache_path", "trt_force_timing_cache", "trt_detailed_build_log",
    "trt_build_heuristics_enable", "trt_sparsity_enable", "trt_builder_optimization_level", "trt_auxiliary_streams",
    "trt_tactic_sources", "trt_extra_plugin_lib_paths", "trt_profile_min_shapes", "trt_profile_max_shapes",
    "trt_profile_opt_shapes", "trt_cuda_graph_enable", "trt_dump_ep_context_model", "trt_ep_context_file_path",
    "trt_ep_context_embed_mode",
})
# The keys it parses as booleans (ParseBoolValue: true/on/1 or false/off/0, any case).
R24_10_BOOLEAN_VALUES = frozenset({"true", "on", "1", "false", "off", "0"})


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_every_tensorrt_key_is_one_the_r24_10_backend_passes_on(precision) -> None:
    _, config = _model_config(MINILM_LIKE, device="gpu", tensorrt=True, precision=precision)
    parameters = config.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters
    assert set(parameters) <= R24_10_TENSORRT_KEYS, set(parameters) - R24_10_TENSORRT_KEYS
    for key in ("trt_engine_cache_enable", "trt_layer_norm_fp32_fallback"):
        assert key not in parameters or parameters[key].lower() in R24_10_BOOLEAN_VALUES


def test_profile_follows_reconfigured_buckets_and_batch() -> None:
    """`tune` re-plans: the profile moves with --buckets and --max-batch-size, never left behind."""
    _, before = _model_config(MINILM_LIKE, device="gpu", tensorrt=True)
    _, after = _model_config(MINILM_LIKE, device="gpu", tensorrt=True, max_batch_size=8, buckets=[32, 128])
    assert _profiles(before) != _profiles(after)
    assert _profiles(after)["trt_profile_max_shapes"]["input_ids"] == (8, 256)
    assert _profiles(after)["trt_profile_opt_shapes"]["input_ids"] == (8, 128)


@pytest.mark.parametrize("options", [{}, {"precision": "int8"}, {"device": "gpu"}], ids=["cpu", "cpu-int8", "gpu-cuda"])
def test_no_tensorrt_block_without_tensorrt(options) -> None:
    repo, config = _model_config(**options)
    assert repo.tensorrt is None and not config.HasField("optimization")
    assert "trt_" not in str(config)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("model", [BERT, MINILM_LIKE], ids=["with-token-type-ids", "ids-and-mask"])
def test_warmup_samples_match_the_buckets(device, model) -> None:
    repo, config = _model_config(model, device=device, tensorrt=device == "gpu", buckets=[8, 64], max_batch_size=32)
    one_row = [w for w in config.model_warmup if w.batch_size == 1]
    assert [w.name for w in one_row] == [f"bucket_{b}" for b in repo.buckets] and repo.buckets == (8, 64, 256)
    full = [w for w in config.model_warmup if w.batch_size > 1]
    # A GPU also runs a full batch of the longest bucket (its peak memory); a CPU does not (seconds of start).
    assert [(w.name, w.batch_size) for w in full] == ([("bucket_256_batch_32", 32)] if device == "gpu" else [])
    for sample in config.model_warmup:
        length = int(sample.name.split("_")[1])
        assert sorted(sample.inputs) == sorted(i.name for i in config.input)  # every input (a map: no order)
        for tensor in sample.inputs.values():
            assert tensor.data_type == mc.TYPE_INT64 and list(tensor.dims) == [length]
            # Zeros: id 0 is in every vocabulary; random_data would fill int64 ids with random bytes.
            assert tensor.WhichOneof("input_data_type") == "zero_data" and tensor.zero_data
    if device == "gpu":  # inside the TensorRT profile, or the warm-up itself would fail the load
        profile = _profiles(config)
        for sample in config.model_warmup:
            for name, tensor in sample.inputs.items():
                shape = (sample.batch_size, *tensor.dims)
                lo, hi = profile["trt_profile_min_shapes"][name], profile["trt_profile_max_shapes"][name]
                assert all(a <= s <= b for a, s, b in zip(lo, shape, hi))


def test_one_row_batches_warm_once() -> None:
    _, config = _model_config(device="gpu", max_batch_size=1)
    assert all(w.batch_size == 1 for w in config.model_warmup)


@pytest.mark.parametrize("tokenizer", ["python", "graph"])
def test_only_the_production_model_step_warms_up_and_a_tokenizer_graph(tokenizer: str) -> None:
    """The Python steps never warm up; a first step that is a graph warms up on one real text (the empty one
    Triton would send is a blank text, which it refuses)."""
    opts = GenerateOptions(model="/models/x", device="gpu", tensorrt=True, tokenizer=tokenizer)
    repo = repository.plan(opts, BERT, "demo")
    configs = repository.validate(repository.render(repo, repository.manifest(opts, repo), PASSED))
    warming = [path for path, config in configs.items() if config.model_warmup]
    assert warming == (["demo_model/config.pbtxt"] if tokenizer == "python" else
                       ["demo_tokenizer/config.pbtxt", "demo_model/config.pbtxt"])
