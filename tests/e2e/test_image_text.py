"""A tiny CLIP served end to end: one repository, one server per variant (production on the native onnxruntime
backend, fused), images in each format and texts against the library's own encode, and bad images refused one by
one while the server keeps serving."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from support import model_zoo
from support.stopping import stop_later
from tritonize.generate import generate
from tritonize.runtime.local import LocalRuntime
from tritonize.spec.options import GenerateOptions
from tritonize.tasks.image_text.task import verification_images

pytestmark = pytest.mark.usefixtures("native_backend")

VARIANTS = ("production", "fused")
TEXTS = ["the cat", "a photo of the thin", "on at in"]
NAME = "clip"


@pytest.fixture(scope="module")
def served(local_options, tmp_path_factory):
    base = tmp_path_factory.mktemp("image_text")
    folder = model_zoo.build_image_text(base / "clip")
    repo = base / "repo"
    generate(GenerateOptions(model=str(folder), name=NAME, output=str(repo)))
    runtimes = {v: LocalRuntime(local_options(repo, base / f"run-{v}"), quiet=True, variant=v) for v in VARIANTS}
    try:
        with ThreadPoolExecutor(len(VARIANTS)) as pool:
            ups = {v: pool.submit(r.up) for v, r in runtimes.items()}
            endpoints = {v: up.result() for v, up in ups.items()}
        yield folder, endpoints
    finally:
        stop_later(*runtimes.values())


def infer(endpoint, name: str, values: list[bytes]) -> np.ndarray:
    client = grpcclient.InferenceServerClient(endpoint.grpc)
    data = np.array(values, dtype=object).reshape(-1, 1)
    tensor = grpcclient.InferInput(name, list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    return client.infer(NAME, [tensor]).as_numpy("embedding")


def library(folder, images: list[bytes], texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' own: get_image_features on the folder's processor's pixels, get_text_features on its tokens."""
    import torch
    import transformers

    model = transformers.CLIPModel.from_pretrained(folder).eval()
    processor = transformers.AutoProcessor.from_pretrained(folder)
    with torch.no_grad():
        pixels = processor(images=[Image.open(io.BytesIO(b)) for b in images], return_tensors="pt")["pixel_values"]
        image = model.get_image_features(pixel_values=pixels).pooler_output.numpy()
        tokens = processor(text=texts, padding=True, return_tensors="pt")
        text = model.get_text_features(**tokens).pooler_output.numpy()
    return image, text


@pytest.mark.parametrize("variant", VARIANTS)
def test_images_and_texts_answer_as_the_library(served, variant: str) -> None:
    folder, endpoints = served
    files = verification_images()
    images = [files["png"], files["jpeg"], files["webp"], files["rgba png"]]
    want_images, want_texts = library(folder, images, TEXTS)
    got_images = infer(endpoints[variant], "IMAGE", images)
    got_texts = infer(endpoints[variant], "TEXT", [t.encode() for t in TEXTS])
    assert np.abs(got_images - want_images).max() < 1e-5
    assert np.abs(got_texts - want_texts).max() < 1e-5
    assert np.abs(got_images @ got_texts.T - want_images @ want_texts.T).max() < 1e-5


def _bytes(image: Image.Image, fmt: str, **kw) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kw)
    return buffer.getvalue()


def bad_images() -> dict[str, tuple[bytes, str]]:
    """Each bad image, and a word its refusal says."""
    png = verification_images()["png"]
    bomb = _bytes(Image.new("L", (8000, 6000)), "PNG")  # 48 megapixels, a few kilobytes of file
    return {
        "not an image": (b"this is plain text, not a picture", "not an image"),
        "truncated": (png[: len(png) // 2], "cannot be decoded"),
        "unsupported format": (_bytes(Image.new("RGB", (8, 8)), "GIF"), "GIF"),
        "decompression bomb": (bomb, "pixels"),
        "empty": (b"", "empty"),
    }


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", sorted(bad_images()))
def test_a_bad_image_is_refused_and_the_server_keeps_serving(served, variant: str, case: str) -> None:
    _, endpoints = served
    data, said = bad_images()[case]
    with pytest.raises(InferenceServerException) as refused:
        infer(endpoints[variant], "IMAGE", [verification_images()["png"], data])
    assert "IMAGE[1]" in str(refused.value) and said in str(refused.value)
    assert infer(endpoints[variant], "IMAGE", [verification_images()["png"]]).shape == (1, 24)


def test_a_request_sends_images_or_texts(served) -> None:
    _, endpoints = served
    client = grpcclient.InferenceServerClient(endpoints["production"].grpc)
    tensors = []
    for name, value in (("IMAGE", verification_images()["png"]), ("TEXT", b"the cat")):
        tensor = grpcclient.InferInput(name, [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[value]], dtype=object))
        tensors.append(tensor)
    with pytest.raises(InferenceServerException, match="not both"):
        client.infer(NAME, tensors)
