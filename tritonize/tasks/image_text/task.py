"""Image-and-text embeddings: CLIP and SigLIP, bare (transformers' CLIPModel, SiglipModel) or as
sentence-transformers saves a CLIP folder.

One ONNX graph holds both towers, each with its projection, as the library returns the embedding
(`get_image_features` / `get_text_features`'s pooled output; normalised only where the folder's sentence-transformers
modules normalise): an `If` on the pixels' height runs the vision tower for a batch of images and the text tower for a
batch of texts (served/image_text.py says how rows of each kind reach it), so the repository keeps one model step,
on Triton's native onnxruntime backend. Each tower is exported alone by the legacy tracer and the two are joined
with onnx's own graph types.

Verification holds the graph to the library's encode on the texts (verify.py's rows), on images made here in
each served format and through the served decoding and pixel preparation (served/images.py) against the folder's
own image processor class, and the images' and texts' cross-modal similarities to the library's.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...serving.image_text import PAD_TO_MAX
from ...serving.images import MAX_PIXELS, MAX_PIXELS_PARAMETER, PARAMETER, PIXEL_VALUES, Preprocess, decode_image
from ...spec import ModelSpec, Options, PrepareModel, TensorSpec, WarmupInputs
from ...spec.names import TOKEN_INPUTS, TOKENIZER_FILE
from ..task import (FLOAT, Calibrator, Detector, Ensemble, Exporter, Task, Tokens, Verifier, library_model,
                   refuse_foreign_flags)
from .contract import CONTRACT, OUTPUT, Head

if TYPE_CHECKING:
    from ...folder import ModelFolder

# The transformers classes served: the whole two-tower model of each family.
ARCHITECTURES = {"clip": "CLIPModel", "siglip": "SiglipModel"}
# The sentence-transformers modules a served CLIP folder may hold: the model (CLIPModel before 5.4, Transformer
# after), then a Normalize.
ST_MODULES = ("CLIPModel", "Transformer", "Normalize")


def _tower_classes():
    import torch
    import torch.nn.functional as F  # noqa: N812

    def features(out):
        """transformers 5 returns a model output whose pooled output is the projected embedding; 4 a tensor."""
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    class Towers(torch.nn.Module):
        """The two towers as the library calls them; `normalize` as sentence-transformers' Normalize."""

        def __init__(self, model, normalize: bool, pad_to_max: bool):
            super().__init__()
            self.model, self.normalize, self.pad_to_max = model, normalize, pad_to_max

        def _out(self, x):
            return F.normalize(x, p=2, dim=1) if self.normalize else x

        def text(self, input_ids, attention_mask):
            mask = None if self.pad_to_max else attention_mask  # SigLIP reads every padded position, unmasked
            return self._out(features(self.model.get_text_features(input_ids=input_ids, attention_mask=mask)))

        def image(self, pixel_values):
            return self._out(features(self.model.get_image_features(pixel_values=pixel_values)))

    class Text(torch.nn.Module):
        def __init__(self, towers):
            super().__init__()
            self.towers = towers

        def forward(self, input_ids, attention_mask):
            return self.towers.text(input_ids, attention_mask)

    class Vision(torch.nn.Module):
        def __init__(self, towers):
            super().__init__()
            self.towers = towers

        def forward(self, pixel_values):
            return self.towers.image(pixel_values)

    return Towers, Text, Vision


class ImageTextDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        if not folder.image_text or folder.architecture not in ("", ARCHITECTURES.get(folder.model_type)):
            return False
        return folder.modules is None or all(k in ST_MODULES for k in folder.module_kinds)

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        refuse_foreign_flags(options, self.task.own_options, "an image-and-text model")
        family = folder.model_type
        if family == "siglip" and not (folder.root / TOKENIZER_FILE).is_file():
            raise TritonizeError(
                f"SigLIP's own tokenizer in {folder.root} (SiglipTokenizer: SentencePiece, with its own lower-casing and "
                f"punctuation stripping) has no {TOKENIZER_FILE} version in transformers, so the served step cannot "
                "tokenize its texts as the library does",
                hint=f"a SigLIP folder whose tokenizer is a {TOKENIZER_FILE} (the tokenizers library) is served")
        config = folder.config
        if family == "clip":
            dim = int(config.get("projection_dim") or 512)
        else:  # SigLIP's text head keeps the width of its hidden states, as its vision tower does
            dim = int((config.get("text_config") or {}).get("projection_size")
                      or (config.get("text_config") or {}).get("hidden_size") or 768)
        vision = config.get("vision_config") or {}
        size = int(vision.get("image_size") or 224)
        normalize = "Normalize" in folder.module_kinds
        library = "sentence-transformers" if folder.modules is not None else "transformers"
        return Head(family, dim, library, normalize, (size, size), pad_to_max=family == "siglip")

    def describe(self, head: Head) -> str:  # type: ignore[override]
        return (f"{head.family} towers, {head.dim}-value embeddings{', normalised' if head.normalize else ''}, "
                f"images {head.image_size[0]}x{head.image_size[1]}")


class ImageTextTokens(Tokens):
    def declared_max_length(self, folder: ModelFolder, options: Options) -> int | None:
        """The text tower's positions (CLIP 77, SigLIP 64): the folder's top-level config has none."""
        positions = (folder.config.get("text_config") or {}).get("max_position_embeddings")
        return int(positions) if positions else None

    def token_inputs(self, folder: ModelFolder, tokenizer_inputs: tuple[str, ...]) -> tuple[str, ...]:
        return TOKEN_INPUTS


class ImageTextEnsemble(Ensemble):
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(OUTPUT, FLOAT, (head.dim,)),)

    def warmup_inputs(self, head: Head) -> WarmupInputs:
        """One image of zeros: the vision branch's first run (its allocations) before the first image."""
        return (("image", ((PIXEL_VALUES, (3, *head.image_size)),)),)

    def first_parameters(self, spec: ModelSpec, model_step: str, max_batch_size: int) -> dict[str, str]:
        """The folder's image processor as the served step repeats it, the pixel bound, and (SigLIP) texts padded
        to the max length."""
        head: Head = spec.head  # type: ignore[assignment]
        params = {PARAMETER: preprocess_of(image_processor(spec)).to_json(), MAX_PIXELS_PARAMETER: str(MAX_PIXELS)}
        if head.pad_to_max:
            params |= {PAD_TO_MAX: "1", "buckets": str(spec.max_length)}
        return params


class ImageTextExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        import transformers

        head: Head = spec.head  # type: ignore[assignment]
        towers, _, _ = _tower_classes()
        kwargs = {"attn_implementation": "eager"} if eager else {}
        model_class = getattr(transformers, ARCHITECTURES[head.family])
        try:
            model = model_class.from_pretrained(spec.source, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise TritonizeError(f"transformers could not load {spec.source} as {model_class.__name__}: {exc}") from exc
        return towers(model.eval(), head.normalize, head.pad_to_max).eval()

    def export_graph(self, spec: ModelSpec, graph: Any, path: Path, opset: int) -> Path:
        """Each tower traced alone, then one graph: an `If` on the pixels' height (1 for a text row) chooses."""
        import torch

        _, text_class, vision_class = _tower_classes()
        head: Head = spec.head  # type: ignore[assignment]
        ids = torch.tensor([[1, 2, 3, 4, 0, 0], [1, 2, 3, 4, 5, 6]]).clamp(max=graph.model.config.text_config.vocab_size - 1)
        mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])
        if head.pad_to_max:
            ids = ids[:, :1].repeat(1, spec.max_length)
            mask = torch.ones_like(ids)
        pixels = torch.randn(2, 3, *head.image_size)
        work = path.parent
        text_path, vision_path = work / "text.onnx", work / "vision.onnx"
        _trace(text_class(graph), (ids, mask), text_path, ["input_ids", "attention_mask"],
               {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}, opset)
        _trace(vision_class(graph), (pixels,), vision_path, [PIXEL_VALUES],
               {PIXEL_VALUES: {0: "batch", 2: "height", 3: "width"}}, opset)
        joined = join_towers(text_path, vision_path, head.dim)
        import onnx

        onnx.save_model(joined, str(path))
        text_path.unlink()
        vision_path.unlink()
        return path

    def graph_feeds(self, spec: ModelSpec, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Text rows' pixels (1x1: the text branch); SigLIP's texts padded to the max length, unmasked, as its
        processor pads them."""
        head: Head = spec.head  # type: ignore[assignment]
        feeds = dict(feeds)
        if head.pad_to_max:
            from ...serving.batching import pad_rows

            real = [ids[mask == 1] for ids, mask in zip(feeds["input_ids"], feeds["attention_mask"])]
            feeds["input_ids"] = pad_rows(real, spec.max_length, spec.pad_token_id)
            feeds["attention_mask"] = np.ones_like(feeds["input_ids"])
        feeds[PIXEL_VALUES] = np.zeros((len(feeds["input_ids"]), 3, 1, 1), dtype=np.float32)
        return feeds

    def image_feeds(self, spec: ModelSpec, files: list[tuple[str, bytes]]) -> dict[str, np.ndarray]:
        """Encoded images -> the graph's inputs, as the served step makes them (one padding token each)."""
        pixels = np.stack([preprocess_of(image_processor(spec))(decode_image(data, name)) for name, data in files])
        n = len(files)
        return {"input_ids": np.full((n, 1), spec.pad_token_id, dtype=np.int64),
                "attention_mask": np.ones((n, 1), dtype=np.int64), PIXEL_VALUES: pixels}

    def other_checks(self, spec: ModelSpec, graph: Any, path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The verification images through the served decoding and preparation into the graph, against the
        library's encode of the same decoded images (the folder's own processor); the pixels themselves against
        that processor's; and the images' similarities to the texts against the library's."""
        import onnxruntime as ort

        from ...serving.tokenizer import TextEncoder

        files = verification_images()
        decoded = [decode_image(data, name) for name, data in files.items()]
        processor = image_processor(spec)
        served_pixels = np.stack([preprocess_of(processor)(im) for im in decoded])
        own_pixels = np.stack([np.asarray(processor(images=im, return_tensors="np")["pixel_values"][0]) for im in decoded])
        if served_pixels.shape != own_pixels.shape:
            raise TritonizeError(f"the served image preparation makes pixels of {served_pixels.shape[1:]}, the folder's "
                                 f"{type(processor).__name__} {own_pixels.shape[1:]}", hint="please report this processor")
        texts = [r[0] for r in self.task.verifier.verification_rows()]
        encoder = TextEncoder(spec.tokenizer_file, spec.max_length, [spec.max_length], spec.pad_token_id, spec.input_names)
        text_feeds = self.graph_feeds(spec, encoder.encode(texts, width=0))
        n = len(files)
        image_feeds = {"input_ids": np.full((n, 1), spec.pad_token_id, dtype=np.int64),
                       "attention_mask": np.ones((n, 1), dtype=np.int64), PIXEL_VALUES: served_pixels}
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        served_images = session.run(None, image_feeds)[0]
        served_texts = session.run(None, text_feeds)[0]
        library_images = self._library_images(spec, graph, decoded)
        library_texts = self.task.verifier.reference(spec, graph, [(t,) for t in texts])[1]
        return {
            "image pixels": (own_pixels, served_pixels),
            "images": (library_images, served_images),
            "image-text similarities": (library_images @ library_texts.T, served_images @ served_texts.T),
        }

    def _library_images(self, spec: ModelSpec, graph: Any, images: list) -> np.ndarray:
        head: Head = spec.head  # type: ignore[assignment]
        if head.library == "sentence-transformers":
            return _st(spec).encode(images, batch_size=len(images), convert_to_numpy=True)
        import torch

        processor = image_processor(spec)
        with torch.no_grad():
            return np.concatenate([graph.image(processor(images=im, return_tensors="pt")["pixel_values"]).numpy()
                                   for im in images])


class ImageTextVerifier(Verifier):
    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        """The library's encode of the texts: sentence-transformers' for its folders, else the model's own
        get_text_features on its own processor's tokens."""
        head: Head = spec.head  # type: ignore[assignment]
        texts = [r[0] for r in rows]
        if head.library == "sentence-transformers":
            return "sentence-transformers", _st(spec).encode(texts, batch_size=len(texts), convert_to_numpy=True)
        import torch
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(spec.source)
        padding = "max_length" if head.pad_to_max else True
        out = []
        with torch.no_grad():
            for text in texts:
                enc = tokenizer([text], padding=padding, truncation=True, max_length=spec.max_length, return_tensors="pt")
                out.append(graph.text(enc["input_ids"], enc.get("attention_mask", torch.ones_like(enc["input_ids"])))[0].numpy())
        return "transformers", np.stack(out)


class ImageTextCalibrator(Calibrator):
    calibrates = True  # int8/uint8 embeddings, over the ranges of both towers' answers

    def calibration(self, spec: ModelSpec, served: np.ndarray, source: str, graph: Path) -> dict:
        """The per-dimension ranges int8/uint8 quantize with: of the served graph's vectors of the calibration
        texts and of the verification images (through the served preparation), so both kinds fall inside them."""
        import onnxruntime as ort

        from ..embedding.quantization import Calibration, ranges_of

        images = self.task.exporter.image_feeds(spec, list(verification_images().items()))
        session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
        vectors = np.concatenate([served, session.run(None, images)[0]])
        return Calibration(f"{source} and {len(images[PIXEL_VALUES])} images", len(vectors),
                           {spec.head.dim: ranges_of(vectors)}).to_dict()


class ImageText(Task):
    contract = CONTRACT
    summary = "IMAGE (encoded PNG, JPEG or WebP files) or TEXT in, `embedding` (FP32 [N, dim]) out, one space"
    serves = "CLIPModel and SiglipModel folders, and sentence-transformers CLIP folders (images and texts)"
    pipeline = PrepareModel("image_text", "ImageTextEncoder", (TensorSpec(PIXEL_VALUES, FLOAT, (3, -1, -1)),))
    Detector = ImageTextDetector
    Tokens = ImageTextTokens
    Ensemble = ImageTextEnsemble
    Exporter = ImageTextExporter
    Verifier = ImageTextVerifier
    Calibrator = ImageTextCalibrator


def _trace(module, args, path: Path, inputs: list[str], axes: dict, opset: int) -> None:
    import warnings

    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), input_names=inputs, output_names=[OUTPUT],
                          dynamic_axes={**axes, OUTPUT: {0: "batch"}}, opset_version=opset, do_constant_folding=True,
                          dynamo=False)


def join_towers(text_path: Path, vision_path: Path, dim: int):
    """One graph of two: inputs input_ids, attention_mask, pixel_values; `embedding` from the vision tower where
    the pixels are taller than 1, else from the text tower (each a branch of one If, reading the outer inputs)."""
    import onnx
    from onnx import TensorProto, compose, helper

    text = compose.add_prefix(onnx.load(str(text_path)), "text/", rename_inputs=False, rename_outputs=False)
    vision = compose.add_prefix(onnx.load(str(vision_path)), "vision/", rename_inputs=False, rename_outputs=False)

    def branch(model, name: str):
        g = model.graph
        for node in g.node:  # the branch's own output name, apart from the If's
            node.output[:] = [f"{name}_{OUTPUT}" if o == OUTPUT else o for o in node.output]
        out = helper.make_tensor_value_info(f"{name}_{OUTPUT}", TensorProto.FLOAT, None)
        return helper.make_graph(list(g.node), name, [], [out], initializer=list(g.initializer))

    inputs = [i for i in text.graph.input] + [i for i in vision.graph.input]
    # A tower that reads no mask (SigLIP's text tower: every position, unmasked) loses the input in the trace; the
    # graph still takes it, unread, so the served step's tensors are the same for every family.
    traced = {i.name for i in inputs}
    inputs[len(text.graph.input):len(text.graph.input)] = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in TOKEN_INPUTS if name not in traced]
    nodes = [
        helper.make_node("Shape", [vision.graph.input[0].name], ["pixel_height"], start=2, end=3),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.INT64, [1], [1])),
        helper.make_node("Greater", ["pixel_height", "one"], ["is_image"]),
        helper.make_node("Squeeze", ["is_image"], ["is_image_scalar"]),
        helper.make_node("If", ["is_image_scalar"], [OUTPUT], then_branch=branch(vision, "vision"),
                         else_branch=branch(text, "text")),
    ]
    output = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", dim])
    graph = helper.make_graph(nodes, "image_text", inputs, [output])
    model = helper.make_model(graph, opset_imports=list(text.opset_import), producer_name="tritonize")
    model.ir_version = text.ir_version
    onnx.checker.check_model(model)
    return model


def image_processor(spec: ModelSpec) -> Any:
    """The folder's own image processor class, as transformers loads it."""
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(spec.source)
    except Exception as exc:  # noqa: BLE001
        raise TritonizeError(f"transformers could not load the image processor in {spec.source} ({exc})",
                             hint="save the model's processor there: AutoProcessor.from_pretrained(...).save_pretrained(folder)") from exc


def preprocess_of(processor: Any) -> Preprocess:
    """The settings the served step prepares pixels with; a processor whose steps it does not repeat is refused."""
    kind = type(processor).__name__
    known = ("CLIPImageProcessor", "SiglipImageProcessor")
    if not kind.startswith(known):
        raise TritonizeError(f"the image processor {kind} is not one the served step repeats",
                             hint=f"tritonize serves {', '.join(known)}")
    size = dict(processor.size)
    size = {k: v for k, v in size.items() if v is not None}
    crop = {k: v for k, v in dict(processor.crop_size or {}).items() if v is not None} or None
    return Preprocess(
        size=size, resample=int(processor.resample), do_resize=bool(processor.do_resize),
        do_center_crop=bool(getattr(processor, "do_center_crop", False)), crop_size=crop,
        do_rescale=bool(processor.do_rescale), rescale_factor=float(processor.rescale_factor),
        do_normalize=bool(processor.do_normalize), image_mean=tuple(map(float, processor.image_mean)),
        image_std=tuple(map(float, processor.image_std)), do_convert_rgb=bool(processor.do_convert_rgb),
    )


def _st(spec: ModelSpec) -> Any:
    from sentence_transformers import SentenceTransformer

    model = library_model(SentenceTransformer, spec)
    model.max_seq_length = spec.max_length
    return model


def verification_images() -> dict[str, bytes]:
    """Images made here, one per case the served step meets: each format, square and not, smaller and larger than
    the towers' input, grey, with transparency, a palette. Deterministic (a seeded generator)."""
    from PIL import Image

    rng = np.random.default_rng(0)

    def picture(height: int, width: int) -> np.ndarray:
        y, x = np.mgrid[0:height, 0:width]
        base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1)
        return np.clip(base + rng.integers(0, 40, base.shape), 0, 255).astype(np.uint8)

    def encoded(image, fmt: str, **kw) -> bytes:
        buffer = io.BytesIO()
        image.save(buffer, format=fmt, **kw)
        return buffer.getvalue()

    rgb = Image.fromarray(picture(300, 400))
    return {
        "png": encoded(rgb, "PNG"),
        "jpeg": encoded(Image.fromarray(picture(250, 180)), "JPEG", quality=90),
        "webp": encoded(Image.fromarray(picture(64, 96)), "WEBP", lossless=True),
        "small png": encoded(Image.fromarray(picture(12, 20)), "PNG"),
        "grey jpeg": encoded(Image.fromarray(picture(120, 120)[..., 0]), "JPEG"),
        "rgba png": encoded(Image.fromarray(np.dstack([picture(90, 70), rng.integers(0, 256, (90, 70), dtype=np.uint8)])), "PNG"),
        "palette png": encoded(rgb.convert("P"), "PNG"),
    }


TASK = ImageText()
