"""A tiny CLIP and a tiny SigLIP served end to end: one repository each, one server per variant (production on the native onnxruntime
backend, fused), images in each format and texts against the library's own encode, and bad images refused one by
one while the server keeps serving; the HTTP API in front of the production server, called by the cohere and
openai SDKs and plain httpx in each image form (Cohere's images and inputs, Jina's items, vLLM's messages)."""

from __future__ import annotations

import base64
import json
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from support import model_zoo
from support.api import KEY, start_api, stop
from support.image_server import MOVED, image_server
from support.stopping import stop_later
from tritonize.generate import generate
from tritonize.repository.rendering import parse_config
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


def test_bench_sends_images_and_texts_each_checked_against_the_steps_in_process(served, tmp_path) -> None:
    """bench --workloads images,short: JPEG files as IMAGE and texts as TEXT through the ensemble over gRPC, the
    first answers of each checked against the repository's own steps in-process, and the first step's work per
    image timed apart from the graph's."""
    import json

    from tritonize.cli import main

    folder, endpoints = served
    ep = endpoints["production"]
    out = tmp_path / "results"
    rc = main(["bench", "--repository", str(folder.parent / "repo"), "--url", ep.http, "--grpc-url", ep.grpc,
               "--metrics-url", ep.metrics, "--requests", "12", "--warmup", "2", "--concurrency", "1,2",
               "--workloads", "images,short", "--short-tokens", "8", "--protocols", "grpc", "--peers", "floor",
               "--output", str(out)])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    assert {w: c["passed"] for w, c in doc["checks"]["triton"].items()} == {"images": True, "short": True}
    runs = {(r["workload"], r["concurrency"]): r for r in doc["runs"]}
    assert set(runs) == {(w, c) for w in ("images", "short") for c in (1, 2)}
    for (workload, _), r in runs.items():
        assert (r["completed"], r["errors"]) == (12, 0)
        assert r["steps"]["model"]["inferences"] >= 12 and ("padding_waste" in r) == (workload == "short")
    assert doc["image_split"]["first_ms"]["requests"] == doc["image_split"]["model_ms"]["requests"] == 12
    assert "images" not in doc["floor"] and doc["floor"]["short"]["arrival"]["rps"] > 0


# -- the HTTP API ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api(served, tmp_path_factory):
    """The API in front of the production server (the fixture's repository)."""
    folder, endpoints = served
    repo = folder.parent / "repo"
    started = start_api(repo, endpoints["production"].grpc, "--max-client-batch-size", "8", key=KEY)
    try:
        yield started
    finally:
        stop(started)


def data_uri(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def post(api, path: str, body: dict):
    import httpx

    return httpx.post(api.url + path, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)


def test_cohere_sdk_embeds_images_and_texts_as_the_library(served, api) -> None:
    import cohere

    folder, _ = served
    files = verification_images()
    images = [files["png"], files["jpeg"], files["webp"]]
    want_images, want_texts = library(folder, images, TEXTS)
    client = cohere.ClientV2(base_url=api.url, api_key=KEY)
    answer = client.embed(model=NAME, input_type="image", embedding_types=["float"],
                          images=[data_uri(images[0]), data_uri(images[1], "jpeg"), data_uri(images[2], "webp")])
    got = np.array(answer.embeddings.float_, dtype=np.float32)
    assert got.shape == want_images.shape and np.abs(got - want_images).max() < 1e-5
    texts = client.embed(model=NAME, input_type="search_query", embedding_types=["float"], texts=TEXTS)
    assert np.abs(np.array(texts.embeddings.float_, dtype=np.float32) - want_texts).max() < 1e-5
    assert texts.texts == TEXTS and not answer.texts
    assert answer.meta.billed_units.images == 3 and texts.meta.billed_units.images is None
    assert texts.meta.billed_units.input_tokens > 0
    # `inputs`: one content part each, a text or an image, in order
    mixed = client.embed(model=NAME, input_type="search_document", embedding_types=["float"], inputs=[
        {"content": [{"type": "image_url", "image_url": {"url": data_uri(images[1], "jpeg")}}]},
        {"content": [{"type": "text", "text": TEXTS[0]}]}])
    got = np.array(mixed.embeddings.float_, dtype=np.float32)
    assert np.abs(got - np.stack([want_images[1], want_texts[0]])).max() < 1e-5
    assert mixed.meta.billed_units.images == 1


def test_cohere_sdk_gets_every_embedding_type_of_images(served, api) -> None:
    import cohere
    from sentence_transformers.util import quantize_embeddings

    from tritonize.spec import QUANTIZATION_FILE, repo_paths
    from tritonize.tasks.embedding.quantization import Calibration

    folder, endpoints = served
    files = verification_images()
    images = [files["png"], files["grey jpeg"], files["palette png"]]
    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    client = cohere.ClientV2(base_url=api.url, api_key=KEY)
    raw = client.with_raw_response.embed(model=NAME, input_type="image", embedding_types=types,
                                         images=[data_uri(x) for x in images])
    given = raw.data.embeddings.model_dump(by_alias=True, exclude_none=True)
    vectors = infer(endpoints["production"], "IMAGE", images)
    calibration = Calibration.read(repo_paths(folder.parent / "repo", NAME)["model"] / "1" / QUANTIZATION_FILE)
    assert calibration is not None and calibration.source == "verification corpus and 7 images"
    np.testing.assert_array_equal(np.array(given["float"], dtype=np.float32), vectors)
    assert given["base64"] == [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
    for kind in ("int8", "uint8", "binary", "ubinary"):
        expected = quantize_embeddings(vectors, kind, ranges=calibration.of_size(24))
        assert np.array(given[kind]).tolist() == expected.tolist(), kind
    assert raw.headers["quantization-ranges"] == calibration.label(24)


def test_tei_embeds_and_compares_an_image_text_models_texts(served, api) -> None:
    """text-embeddings-inference's /embed (unit vectors unless asked otherwise) and /similarity on the text tower."""
    folder, _ = served
    _, want = library(folder, [verification_images()["png"]], TEXTS)
    unit = want / np.linalg.norm(want, axis=1, keepdims=True)
    got = post(api, "/embed", {"inputs": TEXTS})
    assert got.status_code == 200 and np.abs(np.array(got.json()) - unit).max() < 1e-5
    raw = post(api, "/embed", {"inputs": TEXTS, "normalize": False, "model": NAME})
    assert np.abs(np.array(raw.json()) - want).max() < 1e-5
    similar = post(api, "/similarity", {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}})
    assert np.abs(np.array(similar.json()) - unit[1:] @ unit[0]).max() < 1e-5


def test_openai_embeddings_take_jina_items_and_vllm_messages(served, api) -> None:
    from openai import OpenAI

    folder, _ = served
    files = verification_images()
    images = [files["png"], files["rgba png"]]
    want_images, want_texts = library(folder, images, TEXTS)
    client = OpenAI(base_url=api.url + "/v1", api_key=KEY)
    # Jina's items, texts and images mixed in one request (the SDK sends base64 floats and decodes them)
    items = [{"image": base64.b64encode(images[0]).decode()}, {"text": TEXTS[1]}, {"image": data_uri(images[1])},
             TEXTS[2]]
    answer = client.embeddings.create(model=NAME, input=items)
    got = np.array([d.embedding for d in answer.data], dtype=np.float32)
    expected = np.stack([want_images[0], want_texts[1], want_images[1], want_texts[2]])
    assert [d.index for d in answer.data] == [0, 1, 2, 3] and np.abs(got - expected).max() < 1e-5
    texts = client.embeddings.create(model=NAME, input=TEXTS, encoding_format="float")
    assert np.abs(np.array([d.embedding for d in texts.data], dtype=np.float32) - want_texts).max() < 1e-5
    # vLLM's messages: one image, or one text, is one embedding
    for content, want in ((([{"type": "image_url", "image_url": {"url": data_uri(images[0])}}]), want_images[0]),
                          ([{"type": "text", "text": TEXTS[0]}], want_texts[0]), (TEXTS[0], want_texts[0])):
        response = post(api, "/v1/embeddings", {"model": NAME, "messages": [{"role": "user", "content": content}],
                                                "encoding_format": "float"})
        assert response.status_code == 200, response.text
        (row,) = response.json()["data"]
        assert np.abs(np.array(row["embedding"], dtype=np.float32) - want).max() < 1e-5


@pytest.mark.parametrize("case", sorted(bad_images()))
def test_the_api_refuses_a_bad_image_with_the_steps_message_and_keeps_serving(served, api, case: str) -> None:
    data, said = bad_images()[case]
    if not data:  # an empty image cannot be written as base64: the API refuses it before Triton
        said = "holds no bytes"
    good = data_uri(verification_images()["png"])
    response = post(api, "/v1/embeddings", {"model": NAME, "input": [{"image": good}, {"image": data_uri(data)}]})
    assert response.status_code in (400, 422) and said in response.text and "input[1]" in response.text, \
        response.text
    assert post(api, "/v1/embeddings", {"model": NAME, "input": [{"image": good}]}).status_code == 200


@pytest.mark.parametrize("body, status, said", [
    ({"input": [{"image": "https://example.com/cat.png"}]}, 400, "remote images are not fetched"),
    ({"messages": [{"content": [{"type": "image_url", "image_url": {"url": "http://example.com/a.jpg"}}]}]}, 400,
     "remote images are not fetched"),
    ({"input": [{"image": "file:///etc/passwd"}]}, 400, "file: URI"),
    ({"input": [{"image": "not base64 at all!"}]}, 422, "not valid base64"),
    ({"input": [{"image": "x", "text": "y"}]}, 422, "`text` or `image`, one of them"),
    ({"messages": [{"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}, 400,
     "holds 2 contents"),
    ({"input": ["a"], "messages": [{"content": "a"}]}, 422, "not both"),
    ({}, 422, "not neither"),
    ({"input": ["a"], "dimensions": 8}, 400, "cannot be cut to 8 values"),
])
def test_the_api_refuses_what_it_cannot_embed_in_one_line(api, body: dict, status: int, said: str) -> None:
    response = post(api, "/v1/embeddings", {"model": NAME, **body})
    assert response.status_code == status and said in response.json()["error"]["message"], response.text


def test_cohere_refuses_a_url_and_an_input_of_two_parts(api) -> None:
    response = post(api, "/v2/embed", {"model": NAME, "input_type": "image", "images": ["https://example.com/a.png"]})
    assert response.status_code == 400 and "remote images are not fetched" in response.json()["message"]
    two = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    response = post(api, "/v2/embed", {"model": NAME, "input_type": "search_query", "inputs": [two]})
    assert response.status_code == 400 and "2 parts" in response.json()["message"]
    response = post(api, "/v2/embed", {"model": NAME, "input_type": "image", "texts": ["a"]})
    assert response.status_code == 422 and "input_type image is for images" in response.json()["message"]


def test_a_url_on_an_allowed_host_embeds_as_its_bytes_and_other_hosts_are_refused(served, api) -> None:
    """A second API allows the local image server's host:port; the fixture's (no host allowed) still refuses."""
    folder, endpoints = served
    png = verification_images()["png"]
    with image_server({"/cat.png": png}) as host:
        fetching = start_api(folder.parent / "repo", endpoints["production"].grpc, "--allow-image-hosts", host,
                             key=KEY)
        try:
            url = f"http://{host}/cat.png"
            inline = post(api, "/v1/embeddings", {"model": NAME, "input": [{"image": data_uri(png)}],
                                                  "encoding_format": "float"})
            assert inline.status_code == 200, inline.text
            want = np.array(inline.json()["data"][0]["embedding"], dtype=np.float32)
            jina = post(fetching, "/v1/embeddings", {"model": NAME, "input": [{"image": url}, {"image": url}],
                                                     "encoding_format": "float"})
            assert jina.status_code == 200, jina.text
            for row in jina.json()["data"]:
                np.testing.assert_array_equal(np.array(row["embedding"], dtype=np.float32), want)
            vllm = post(fetching, "/v1/embeddings", {"model": NAME, "encoding_format": "float", "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]})
            cohere = post(fetching, "/v2/embed", {"model": NAME, "input_type": "image", "embedding_types": ["float"],
                                                  "images": [url]})
            assert vllm.status_code == 200 and cohere.status_code == 200, (vllm.text, cohere.text)
            np.testing.assert_array_equal(np.array(vllm.json()["data"][0]["embedding"], dtype=np.float32), want)
            np.testing.assert_array_equal(np.array(cohere.json()["embeddings"]["float"][0], dtype=np.float32), want)
            other = f"localhost:{host.split(':')[1]}"  # the same server by another name: not allowed
            refused = post(fetching, "/v2/embed", {"model": NAME, "input_type": "image", "embedding_types": ["float"],
                                                   "images": [f"http://{other}/cat.png"]})
            assert refused.status_code == 400 and f"not fetched from {other}" in refused.json()["message"]
            moved = post(fetching, "/v1/embeddings", {"model": NAME, "input": [{"image": f"http://{host}{MOVED}"}]})
            assert moved.status_code == 400 and "redirect" in moved.json()["error"]["message"]
            default = post(api, "/v1/embeddings", {"model": NAME, "input": [{"image": url}]})
            assert default.status_code == 400 and "--allow-image-hosts" in default.json()["error"]["message"]
        finally:
            stop(fetching)


# -- SigLIP ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def siglip(local_options, tmp_path_factory):
    """A tiny SigLIP (its tokenizer a tokenizers Unigram: model_zoo) generated and served in both variants."""
    base = tmp_path_factory.mktemp("siglip")
    folder = model_zoo.build_image_text(base / "siglip", "siglip")
    repo = base / "repo"
    generate(GenerateOptions(model=str(folder), name=NAME, output=str(repo)))
    runtimes = {v: LocalRuntime(local_options(repo, base / f"run-{v}"), quiet=True, variant=v) for v in VARIANTS}
    try:
        with ThreadPoolExecutor(len(VARIANTS)) as pool:
            ups = {v: pool.submit(r.up) for v, r in runtimes.items()}
            endpoints = {v: up.result() for v, up in ups.items()}
        yield folder, repo, endpoints
    finally:
        stop_later(*runtimes.values())


@pytest.mark.parametrize("variant", VARIANTS)
def test_siglip_answers_as_the_library(siglip, variant: str) -> None:
    """get_image_features on its processor's pixels; get_text_features on texts padded to the max length,
    unmasked, as SiglipProcessor pads them and the model was trained."""
    import json

    import torch
    import transformers

    folder, repo, endpoints = siglip
    endpoint = endpoints[variant]
    # the vision branch ran once before the server reported ready, as each token bucket's text branch did
    config = parse_config((repo / f"{NAME}_model" / "config.pbtxt").read_text())
    warmed = {w.name: w for w in config.model_warmup}
    assert list(warmed["image"].inputs["pixel_values"].dims) == [3, model_zoo.IMAGE_TEXT_SIZE, model_zoo.IMAGE_TEXT_SIZE]
    assert list(warmed["bucket_16"].inputs["pixel_values"].dims) == [3, 1, 1]
    report = json.loads((repo / f"{NAME}_model" / "1" / "verification.json").read_text())
    checks = {f"export: {name}" for name in ("images", "image pixels", "image-text similarities")}
    assert report["passed"] and checks <= set(report["others"]) and all(report["others"][c]["passed"] for c in checks)
    assert report["others"]["export: image pixels"]["max_abs"] == 0.0  # SiglipImageProcessor repeated exactly
    files = verification_images()
    images = [files["png"], files["jpeg"], files["webp"], files["palette png"]]
    model = transformers.SiglipModel.from_pretrained(folder).eval()
    processor = transformers.AutoProcessor.from_pretrained(folder)
    with torch.no_grad():
        pixels = processor(images=[Image.open(io.BytesIO(b)) for b in images], return_tensors="pt")["pixel_values"]
        want_images = model.get_image_features(pixel_values=pixels).pooler_output.numpy()
        tokens = processor(text=TEXTS, padding="max_length", max_length=16, return_tensors="pt")
        want_texts = model.get_text_features(input_ids=tokens["input_ids"]).pooler_output.numpy()
    got_images = infer(endpoint, "IMAGE", images)
    got_texts = infer(endpoint, "TEXT", [t.encode() for t in TEXTS])
    assert got_images.shape == (4, 32) and np.abs(got_images - want_images).max() < 1e-5
    assert np.abs(got_texts - want_texts).max() < 1e-5
    assert np.abs(got_images @ got_texts.T - want_images @ want_texts.T).max() < 1e-5
    # padding changes a SigLIP text's vector: the served texts are padded as the library pads them
    with torch.no_grad():
        longest = processor(text=TEXTS, padding=True, return_tensors="pt")
        unpadded = model.get_text_features(input_ids=longest["input_ids"]).pooler_output.numpy()
    assert np.abs(unpadded - want_texts).max() > 1e-3


# -- one API, three tasks -------------------------------------------------------------------------------------------
def test_one_api_serves_an_embedder_a_reranker_and_an_image_text_model(served, stack, local_options,
                                                                        tmp_path) -> None:
    """The embedder-and-reranker repository with the tiny CLIP added (`generate --add`), behind one local Triton
    and one API: each model answers its routes as its own library does, named where two embed."""
    import shutil

    from sentence_transformers import SentenceTransformer

    from support.api import api_over_triton
    from support.multi_model import QUERY
    from support.tasks import cross_encoder_scores
    from tritonize.cli import main

    folder, _ = served
    repo = tmp_path / "retrieval"
    shutil.copytree(stack.repository, repo, ignore=shutil.ignore_patterns("__pycache__"))
    # verified where the module's own repository was generated: here it only joins the others
    assert main(["generate", "--model", str(folder), "--name", NAME, "--output", str(repo), "--add",
                 "--skip-verify"]) == 0
    files = verification_images()
    want_images, want_texts = library(folder, [files["png"], files["jpeg"]], TEXTS)
    documents = ["Triton serves raw strings.", "A fox jumps over the lazy dog."]
    with api_over_triton(local_options(repo, tmp_path / "run"), key=KEY) as (_, api):
        code, _, texts = api.call("POST", "/v1/embeddings", {"model": stack.embedder, "input": TEXTS})
        assert code == 200, texts
        want = SentenceTransformer(str(stack.embedder_source), device="cpu").encode(TEXTS)
        assert np.abs(np.array([d["embedding"] for d in texts["data"]]) - want).max() < 1e-4
        code, _, ranked = api.call("POST", "/v1/rerank", {"query": QUERY, "documents": documents})
        assert code == 200, ranked
        scores = cross_encoder_scores(stack.reranker_source, [(QUERY, d) for d in documents])
        assert max(abs(r["relevance_score"] - scores[r["index"]]) for r in ranked["results"]) < 1e-4
        code, _, mixed = api.call("POST", "/v1/embeddings", {"model": NAME, "input": [
            {"image": data_uri(files["png"])}, {"text": TEXTS[0]}, {"image": data_uri(files["jpeg"], "jpeg")}]})
        assert code == 200, mixed
        got = np.array([d["embedding"] for d in mixed["data"]])
        assert np.abs(got - np.stack([want_images[0], want_texts[0], want_images[1]])).max() < 1e-5
        # two models embed here: a request that names none is told which
        code, _, unnamed = api.call("POST", "/v1/embeddings", {"input": TEXTS})
        assert code == 400 and NAME in json.dumps(unnamed) and stack.embedder in json.dumps(unnamed), unnamed
