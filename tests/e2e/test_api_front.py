"""The API's front for Triton's HTTP protocol, over a real local Triton: tritonclient.http and plain JSON answered
as Triton's own HTTP port answers them (binary tensor extension included), the six bodies that bring Triton 2.51's
own HTTP parser down or get a 500 from it each refused with a 4xx before Triton sees them, and Triton's own HTTP
port off every address but loopback where the deployment publishes its gRPC port everywhere."""

from __future__ import annotations

import http.client
import json
import socket
import time

import numpy as np
import pytest

from support.api import KEY, api_over_triton, start_api, stop

TEXTS = ["Triton serves raw strings.", "a quick brown fox", "hello world"]
VALID = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hello"]}]}).encode()


def deep(levels: int) -> bytes:
    return (b'{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":' + b"[" * levels + b'"x"'
            + b"]" * levels + b"}]}")


def one_text(size: int) -> bytes:
    return json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["x" * size]}]}).encode()


# Six bodies that break Triton 2.51's HTTP parser: its own HTTP port dies on the first three and answers 500 to the
# rest.
SIX = {
    "4 MB sent as curl -d sends it (a form)": (one_text(4_000_000), {"Content-Type": "application/x-www-form-urlencoded"},
                                              415, "Content-Type application/x-www-form-urlencoded is not an inference"),
    "64 MB of JSON": (one_text(64_000_000), {"Content-Type": "application/json"}, 413, "over this server's limit"),
    "JSON nested 100,000 deep inside data": (deep(100_000), {"Content-Type": "application/json"}, 400,
                                             "the body nests JSON deeper than 200 levels"),
    "malformed JSON": (b'{"inputs": [{"name": "TEXT",', {"Content-Type": "application/json"}, 400,
                       "the body is not valid JSON"),
    "JSON nested 10,000 deep": (b"[" * 10_000 + b"]" * 10_000, {"Content-Type": "application/json"}, 400,
                                "the body nests JSON deeper than 200 levels"),
    "a binary header shorter than its JSON": (VALID, {"Inference-Header-Content-Length": str(len(VALID) - 10)}, 400,
                                              "the inference header (the body's first Inference-Header-Content-Length "
                                              "bytes) is not valid JSON"),
}


@pytest.fixture(scope="module")
def front(tiny_embedding_repo, native_backend, local_options, tmp_path_factory):
    options = local_options(tiny_embedding_repo.repository, tmp_path_factory.mktemp("front-run"))
    with api_over_triton(options) as (endpoints, api):
        yield tiny_embedding_repo.name, endpoints, api


def post(url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def ensemble_counts(endpoints, name: str) -> tuple[int, int]:
    """(requests answered, requests failed) of the ensemble, as Triton counts them."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(endpoints.grpc) as client:
        stats = client.get_inference_statistics(name, as_json=True)["model_stats"][0]["inference_stats"]
    return int(stats.get("success", {}).get("count", 0)), int(stats.get("fail", {}).get("count", 0))


def infer_both(url: str, name: str, binary: bool) -> dict[str, np.ndarray]:
    import tritonclient.http as httpclient

    texts = np.array([[t] for t in TEXTS], dtype=object)
    with httpclient.InferenceServerClient(url.split("//", 1)[1]) as client:
        sent = httpclient.InferInput("TEXT", [len(TEXTS), 1], "BYTES")
        sent.set_data_from_numpy(texts, binary_data=binary)
        asked = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in ("embedding", "tokens", "truncated")]
        result = client.infer(name, [sent], outputs=asked)
        alone = client.infer(name, [sent])  # no outputs named: every output, binary (tritonclient's default)
        return {o: result.as_numpy(o) for o in ("embedding", "tokens", "truncated")} | {
            "all": alone.as_numpy("embedding")}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_http_through_the_front_answers_as_tritons_own_port(front, binary: bool) -> None:
    name, endpoints, api = front
    own, through = infer_both(endpoints.http, name, binary), infer_both(api.url, name, binary)
    for output, value in own.items():
        assert through[output].dtype == value.dtype and np.array_equal(through[output], value), output
    assert through["embedding"].shape == (len(TEXTS), 32)


def test_metadata_readiness_and_config_are_tritons_own(front) -> None:
    import tritonclient.http as httpclient

    name, endpoints, api = front
    own = httpclient.InferenceServerClient(endpoints.http.split("//", 1)[1])
    through = httpclient.InferenceServerClient(api.url.split("//", 1)[1])
    try:
        for call, args in (("is_server_live", ()), ("is_server_ready", ()), ("is_model_ready", (name,)),
                           ("is_model_ready", ("no-such-model",)), ("get_server_metadata", ()),
                           ("get_model_metadata", (name,)), ("get_model_metadata", (name, "1"))):
            assert getattr(through, call)(*args) == getattr(own, call)(*args), (call, args)
        for model in (name, f"{name}_model", f"{name}_tokenizer"):
            assert within(own.get_model_config(model), through.get_model_config(model)), model
    finally:
        own.close()
        through.close()


def within(triton: object, front: object) -> bool:
    """Every value Triton writes is the front's (a field Triton 2.51's proto lacks may be the front's alone)."""
    if isinstance(triton, dict):
        return isinstance(front, dict) and all(k in front and within(v, front[k]) for k, v in triton.items())
    if isinstance(triton, list):
        return isinstance(front, list) and len(front) == len(triton) and all(map(within, triton, front))
    return triton == front


def test_curl_json_is_answered_as_tritons_own_port_answers_it(front) -> None:
    name, endpoints, api = front
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [2, 1], "datatype": "BYTES", "data": [["a fox"], ["b"]]}],
                       "outputs": [{"name": "embedding"}, {"name": "tokens", "parameters": {"binary_data": True}}]})
    headers = {"Content-Type": "application/json"}
    path = f"/v2/models/{name}/infer"
    (code, own_headers, own), (status, front_headers, through) = (post(u, path, body.encode(), headers)
                                                                   for u in (endpoints.http, api.url))
    assert code == status == 200
    length, own_length = (int(front_headers["inference-header-content-length"]),
                          int(own_headers["Inference-Header-Content-Length"]))
    header, own_header = json.loads(through[:length]), json.loads(own[:own_length])
    assert [{k: v for k, v in o.items() if k != "data"} for o in header["outputs"]] == [
        {k: v for k, v in o.items() if k != "data"} for o in own_header["outputs"]]
    (vectors,), (own_vectors,) = ([o["data"] for o in h["outputs"] if o["name"] == "embedding"]
                                  for h in (header, own_header))
    assert np.array_equal(np.float32(vectors), np.float32(own_vectors))  # float32 values, however each writes them
    assert through[length:] == own[own_length:] and np.frombuffer(through[length:], "<i4").tolist() == [4, 3]


@pytest.mark.parametrize("path,body,words", [
    ("/v2/models/no-such-model/infer", VALID, "Request for unknown model: 'no-such-model' is not found"),
    ("/v2/models/{name}/infer", VALID.replace(b'"TEXT"', b'"WRONG"'), "unexpected inference input 'WRONG'"),
    ("/v2/models/{name}/versions/7/infer", VALID, "version 7 is not found"),
])
def test_what_triton_refuses_is_refused_with_its_status_and_message(front, path: str, body: bytes, words: str) -> None:
    name, endpoints, api = front
    path = path.format(name=name)
    own = post(endpoints.http, path, body, {"Content-Type": "application/json"})
    through = post(api.url, path, body, {"Content-Type": "application/json"})
    assert through[0] == own[0] and 400 <= own[0] < 500
    assert words in json.loads(through[2])["error"] and words in json.loads(own[2])["error"]


def test_a_graph_steps_refusal_is_the_senders_400_where_triton_answers_500(front) -> None:
    name, endpoints, api = front
    blank = VALID.replace(b'"hello"', b'"   "')
    assert post(endpoints.http, f"/v2/models/{name}/infer", blank, {"Content-Type": "application/json"})[0] == 500
    status, _, answer = post(api.url, f"/v2/models/{name}/infer", blank, {"Content-Type": "application/json"})
    assert status == 400 and "TEXT holds an empty or blank text" in json.loads(answer)["error"]


@pytest.mark.parametrize("case", list(SIX))
def test_each_of_the_six_bodies_is_a_4xx_before_triton_and_the_server_keeps_serving(front, case: str) -> None:
    name, endpoints, api = front
    body, headers, expected, words = SIX[case]
    before = ensemble_counts(endpoints, name)
    status, answer_headers, answer = post(api.url, f"/v2/models/{name}/infer", body, headers)
    message = json.loads(answer)["error"]
    assert status == expected and words in message and "\n" not in message, (status, message)
    assert ensemble_counts(endpoints, name) == before  # Triton never saw it
    assert api.process.poll() is None
    assert post(api.url, f"/v2/models/{name}/infer", VALID, {"Content-Type": "application/json"})[0] == 200
    assert ensemble_counts(endpoints, name) == (before[0] + 1, before[1])


def test_the_v2_routes_keep_the_guards_methods_key_and_metrics(front, tiny_embedding_repo) -> None:
    name, endpoints, api = front
    status, headers, _ = api.call("GET", f"/v2/models/{name}/infer")
    assert status == 405 and headers["Allow"] == "POST"
    assert api.call("GET", "/v2/models/no-such-model")[0] == 404
    keyed = start_api(tiny_embedding_repo.repository, endpoints.grpc, key=KEY)
    try:
        assert keyed.call("POST", f"/v2/models/{name}/infer", VALID, key=None)[0] == 401
        assert keyed.call("GET", "/v2/health/ready", key=None)[0] == 200  # probes send no key
        assert keyed.call("POST", f"/v2/models/{name}/infer", VALID,
                          headers={"Content-Type": "application/json"})[0] == 200
    finally:
        stop(keyed)


def test_front_requests_are_counted_by_route_template(front) -> None:
    import urllib.request

    name, _, api = front
    post(api.url, f"/v2/models/{name}/infer", VALID, {"Content-Type": "application/json"})
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{api.url}/metrics", timeout=10) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    counted = {(s.labels["route"], s.labels["model"], s.labels["status"]): s.value
               for s in families["tritonize_api_requests"].samples if s.name.endswith("_total")}
    assert counted[("/v2/models/{model}/infer", name, "200")] >= 1


def outward_address() -> str | None:
    """This machine's address on its network (not loopback), where it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # nothing is sent: only the route is looked up
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def reachable(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2.0)
        return s.connect_ex((address, port)) == 0


def test_a_server_on_every_address_keeps_tritons_own_http_port_on_loopback(tiny_embedding_repo, native_backend,
                                                                           local_options, tmp_path) -> None:
    """`deploy.py local up --host 0.0.0.0`: gRPC, metrics and the API on every address; Triton's own HTTP port on
    loopback only, so from the network its routes are the front's."""
    from support.stopping import stop_later
    from tritonize.api.child import ApiOptions
    from tritonize.runtime.local import LocalRuntime
    from tritonize.runtime.machine import free_ports

    address = outward_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    (api_port,) = free_ports(1)
    options = local_options(tiny_embedding_repo.repository, tmp_path / "run", host="0.0.0.0")
    runtime = LocalRuntime(options, api=ApiOptions(port=api_port), quiet=True)
    endpoints = runtime.up()
    try:
        assert not reachable(address, options.http_port)
        assert reachable("127.0.0.1", options.http_port) and endpoints.http.startswith("http://127.0.0.1:")
        assert reachable(address, options.grpc_port) and reachable(address, api_port)
        status, _, answer = post(f"http://{address}:{api_port}", f"/v2/models/{tiny_embedding_repo.name}/infer",
                                 VALID, {"Content-Type": "application/json"})
        assert status == 200 and json.loads(answer)["outputs"]
        deadline = time.monotonic() + 5
        while not runtime.status().ready and time.monotonic() < deadline:  # status reads Triton's own HTTP port
            time.sleep(0.2)
        assert runtime.status().ready
    finally:
        stop_later(runtime)
