"""`tritonize k8s render`, tested offline (no cluster runs here).

What is checked, and how:
- every manifest `kubectl apply -k` applies validates against the official Kubernetes OpenAPI schemas of
  release 1.37 (current) and 1.30 (the oldest the docs promise), strict (an unknown field fails), with
  the schemas the kubernetes-validate package carries;
- the KServe InferenceService validates against the vendored excerpt of KServe's CRD
  (tests/data/kserve-inferenceservice-crd.yaml), strict too, and its metadata against Kubernetes' ObjectMeta;
- deliberately broken copies fail both validators, so neither passes everything;
- what the manifests mean: the probes run the image's health script on the repository's health.json
  where each source puts it, CPU and GPU repositories get different resources, the HPA asks for the
  metric the prometheus-adapter rule serves and the rule's model matchers select this repository's steps,
  the pod meets the restricted Pod Security Standard and drains before it is killed;
- the health script's --busy-ok and the init container's fetch program, run for real;
- on a live local Triton (e2e), the series the adapter rule reads, and what its matchers select;
- the CLI (`tritonize k8s render`, `deploy.py k8s render`): files written, one-line errors.
"""

from __future__ import annotations

import copy
import hashlib
import http.server
import io
import re
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from support.k8s import CRD, K8S_VERSIONS, ROOT, container, docs, kserve_errors, kube_errors
from tritonize.cli import main
from tritonize.errors import TritonizeError
from tritonize.runtime import container as ct
from tritonize import k8s
from tritonize.runtime.base import ServerOptions
from tritonize.serving import SERVING_DIR
from tritonize.serving.health import HEALTH_FILE
from tritonize.spec import MANIFEST_FILE, TENSORRT_CACHE, step_names

SOURCES = {
    k8s.IMAGE: {},
    k8s.PVC: {"pvc": "models/tinyemb"},
    k8s.INIT: {"url": "https://models.example.com/tinyemb.tar.gz?sig=a&b=c", "url_sha256": "ab" * 32},
}


# --------------------------------------------------------------------------- helpers


def as_gpu(repository: Path, dest: Path, tensorrt: bool = False) -> Path:
    """A copy of a repository whose manifest says it was generated for GPU (all k8s reads is the manifest)."""
    import shutil

    shutil.copytree(repository, dest)
    manifest = yaml.safe_load((dest / MANIFEST_FILE).read_text())
    manifest.update(device="gpu", tensorrt=tensorrt)
    (dest / MANIFEST_FILE).write_text(yaml.safe_dump(manifest, sort_keys=False))
    return dest


@pytest.fixture(scope="module")
def gpu_repo(tiny_embedding_repo, tmp_path_factory) -> Path:
    return as_gpu(tiny_embedding_repo.repository, tmp_path_factory.mktemp("gpu") / "repo")


@pytest.fixture(scope="module")
def cpu_repo(tiny_embedding_repo) -> Path:
    return tiny_embedding_repo.repository


@pytest.fixture(scope="module")
def trt_repo(tiny_embedding_repo, tmp_path_factory) -> Path:
    return as_gpu(tiny_embedding_repo.repository, tmp_path_factory.mktemp("trt") / "repo", tensorrt=True)


def spec_for(repository: Path, source: str = k8s.IMAGE, **options: Any) -> k8s.K8sSpec:
    return k8s.k8s_spec(k8s.K8sOptions(repository=repository, source=source, **SOURCES[source], **options))


# --------------------------------------------------------------------------- schemas


def test_vendored_crd_is_the_documented_copy() -> None:
    digest = hashlib.sha256(CRD.read_bytes()).hexdigest()
    assert digest in (ROOT / "tests" / "data" / "README.md").read_text()
    assert (ROOT / "tests" / "data" / "kserve-crd.LICENSE").read_text().lstrip().startswith("Apache License")
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["group"] == "serving.kserve.io" and crd["spec"]["names"]["kind"] == "InferenceService"
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["properties"]["spec"]["required"] == ["predictor"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_every_applied_manifest_is_valid_kubernetes(device, source, version, cpu_repo, gpu_repo) -> None:
    spec = spec_for(gpu_repo if device == "gpu" else cpu_repo, source, namespace="ml")
    rendered = docs(spec)
    kustomization = rendered[k8s.KUSTOMIZATION]
    assert kustomization["resources"] == list(k8s.APPLIED)
    for name in kustomization["resources"]:
        doc = rendered[name]
        assert doc["metadata"]["namespace"] == "ml"
        assert kube_errors(doc, version) == [], name


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_inference_service_is_valid_for_kserve(device, source, cpu_repo, gpu_repo) -> None:
    spec = spec_for(gpu_repo if device == "gpu" else cpu_repo, source)
    isvc = docs(spec)[k8s.INFERENCE_SERVICE]
    assert kserve_errors(isvc) == []
    model = isvc["spec"]["predictor"]["model"]
    assert model["modelFormat"]["name"] == "triton" and model["protocolVersion"] == "v2"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    # Where the repository is: KServe's storage initializer fetches a storageUri into /mnt/models.
    expected_uri = {k8s.IMAGE: None, k8s.PVC: "pvc://models/tinyemb", k8s.INIT: SOURCES[k8s.INIT]["url"]}[source]
    assert model.get("storageUri") == expected_uri
    models_dir = k8s.KSERVE_MODELS_DIR if expected_uri else ct.MODELS_DIR
    assert f"--model-repository={models_dir}" in model["args"]
    assert f"{models_dir}/health.json" in model["readinessProbe"]["exec"]["command"]
    assert f"--http-port={k8s.KSERVE_PORTS['http']}" in model["args"]


def test_broken_manifests_fail_both_validators(cpu_repo) -> None:
    rendered = docs(spec_for(cpu_repo))
    deployment = rendered[k8s.DEPLOYMENT]
    assert kube_errors(deployment) == []

    typo = copy.deepcopy(deployment)
    container(typo)["readinesProbe"] = container(typo).pop("readinessProbe")
    assert any("readinesProbe" in e for e in kube_errors(typo))
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "fifty"
    assert kube_errors(wrong_type)
    no_image = copy.deepcopy(deployment)
    del container(no_image)["name"]
    assert kube_errors(no_image)
    hpa = copy.deepcopy(rendered[k8s.HPA])
    hpa["spec"]["metrics"][0]["pods"]["target"]["type"] = "AverageValue"
    hpa["spec"]["metrics"][0]["pods"]["target"]["averageValues"] = "50"
    assert kube_errors(hpa)

    isvc = rendered[k8s.INFERENCE_SERVICE]
    assert kserve_errors(isvc) == []
    for path, value in (
        (("spec", "predictor", "model", "protocolVersionn"), "v2"),  # unknown field
        (("spec", "predictor", "minReplicas"), "two"),  # wrong type
        (("spec", "predictor", "model", "resources", "limits", "memory"), "4 GB"),  # not a quantity
        (("metadata", "labels", "app.kubernetes.io/name"), 7),  # ObjectMeta: labels are strings
    ):
        broken = copy.deepcopy(isvc)
        node = broken
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert kserve_errors(broken), path
    no_format_name = copy.deepcopy(isvc)
    del no_format_name["spec"]["predictor"]["model"]["modelFormat"]["name"]
    assert kserve_errors(no_format_name)
    no_predictor = copy.deepcopy(isvc)
    del no_predictor["spec"]["predictor"]
    assert kserve_errors(no_predictor)


# --------------------------------------------------------------------------- meaning


@pytest.mark.parametrize("source", list(SOURCES))
def test_probes_run_the_health_script_on_the_repository_health_file(source, cpu_repo) -> None:
    rendered = docs(spec_for(cpu_repo, source))
    deployment = rendered[k8s.DEPLOYMENT]
    triton = container(deployment)
    command = triton["readinessProbe"]["exec"]["command"]
    assert command[:2] == ["python3", ct.HEALTH_SCRIPT]  # the script the serving image embeds
    options = dict(zip(command[2::2], command[3::2]))
    assert options["--file"] == f"{ct.MODELS_DIR}/health.json"
    assert options["--url"] == f"http://127.0.0.1:{ct.CONTAINER_PORTS['http']}"
    assert "--busy-ok" in command and triton["livenessProbe"]["exec"]["command"] == command
    assert float(options["--timeout"]) < triton["readinessProbe"]["timeoutSeconds"]
    assert triton["livenessProbe"]["failureThreshold"] > triton["readinessProbe"]["failureThreshold"]
    # Triton's own HTTP port binds the pod's loopback, so the model load is checked from inside the container.
    assert triton["startupProbe"]["exec"]["command"] == list(ct.ready_command())
    assert "--http-address=127.0.0.1" in triton["args"] and "http" not in {p["name"] for p in triton["ports"]}
    # Triton reads the repository where the probe looks for health.json, whichever the source.
    assert f"--model-repository={ct.MODELS_DIR}" in triton["args"]
    mounts = {m["mountPath"]: m for m in triton["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    if source == k8s.IMAGE:
        assert ct.MODELS_DIR not in mounts  # nothing hides the image's own /models
        assert re.search(rf"^COPY \. {ct.MODELS_DIR}$", rendered[k8s.DOCKERFILE], re.MULTILINE)
        assert triton["image"].startswith("tritonize-tinyemb:") and triton["image"].endswith(spec_for(cpu_repo).digest[:12])
    else:
        mount = mounts[ct.MODELS_DIR]
        assert mount["readOnly"] is True
        if source == k8s.PVC:
            assert volumes[mount["name"]]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
            assert mount["subPath"] == "tinyemb"
        else:
            (init,) = [c for c in deployment["spec"]["template"]["spec"]["initContainers"]
                       if c["name"] == "fetch-repository"]
            assert init["volumeMounts"] == [{"name": mount["name"], "mountPath": ct.MODELS_DIR}]
            assert init["command"][-4:] == [SOURCES[k8s.INIT]["url"], ct.MODELS_DIR, HEALTH_FILE, "ab" * 32]
        assert k8s.DOCKERFILE not in rendered


def test_probe_command_runs_against_the_real_script(cpu_repo) -> None:
    """The probe's argv, pointed at this checkout's health.py and repository, parses and fails cleanly
    with nothing listening; --busy-ok turns a 503 (full queues) into healthy, and only a 503."""
    command = container(docs(spec_for(cpu_repo))[k8s.DEPLOYMENT])["readinessProbe"]["exec"]["command"]

    def run(url: str, busy_ok: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(SERVING_DIR / "health.py")] + [
            str(cpu_repo / "health.json") if a == f"{ct.MODELS_DIR}/health.json" else url if a.startswith("http") else a
            for a in command[2:]
            if busy_ok or a != "--busy-ok"
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    closed = run("http://127.0.0.1:9")
    assert closed.returncode == 1 and closed.stdout.startswith("unhealthy:"), closed.stderr

    class Answer(http.server.BaseHTTPRequestHandler):
        code = 503

        def do_POST(self) -> None:
            self.send_response(Answer.code)
            self.end_headers()
            self.wfile.write(b'{"error":"Exceeds maximum queue size"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        busy = run(url)
        assert busy.returncode == 0 and busy.stdout.startswith("healthy (busy):"), busy.stdout
        assert run(url, busy_ok=False).returncode == 1
        Answer.code = 500  # a dead stub answers an error, never 503
        assert run(url).returncode == 1
    finally:
        server.shutdown()


def test_cpu_and_gpu_repositories_get_different_resources(cpu_repo, gpu_repo, tmp_path) -> None:
    cpu = docs(spec_for(cpu_repo))
    gpu = docs(spec_for(gpu_repo))
    assert k8s.GPU_RESOURCE not in yaml.safe_dump(cpu[k8s.DEPLOYMENT])
    assert k8s.GPU_RESOURCE not in yaml.safe_dump(cpu[k8s.INFERENCE_SERVICE])
    assert "tolerations" not in cpu[k8s.DEPLOYMENT]["spec"]["template"]["spec"]
    resources = container(gpu[k8s.DEPLOYMENT])["resources"]
    assert resources["limits"][k8s.GPU_RESOURCE] == resources["requests"][k8s.GPU_RESOURCE] == "1"
    assert gpu[k8s.INFERENCE_SERVICE]["spec"]["predictor"]["model"]["resources"] == resources
    (toleration,) = gpu[k8s.DEPLOYMENT]["spec"]["template"]["spec"]["tolerations"]
    assert toleration["key"] == k8s.GPU_RESOURCE and toleration["effect"] == "NoSchedule"
    assert container(gpu[k8s.DEPLOYMENT])["resources"]["requests"]["memory"] != \
        container(cpu[k8s.DEPLOYMENT])["resources"]["requests"]["memory"]
    two = container(docs(spec_for(gpu_repo, gpus=2, memory="16Gi", cpu="4"))[k8s.DEPLOYMENT])["resources"]
    assert two == {"requests": {"cpu": "4", "memory": "16Gi", k8s.GPU_RESOURCE: "2"},
                   "limits": {"memory": "16Gi", k8s.GPU_RESOURCE: "2"}}
    with pytest.raises(TritonizeError, match="generated for CPU"):
        spec_for(cpu_repo, gpus=1)
    with pytest.raises(TritonizeError, match="generated for GPU"):
        spec_for(gpu_repo, gpus=0)
    # TensorRT: engines are built at first load (a longer startup budget) and cached in a volume that
    # outlives a container restart.
    trt = docs(spec_for(as_gpu(cpu_repo, tmp_path / "trt", tensorrt=True)))[k8s.DEPLOYMENT]
    assert container(trt)["startupProbe"]["failureThreshold"] * container(trt)["startupProbe"]["periodSeconds"] \
        == k8s.STARTUP_TENSORRT_S
    assert "/tmp/tritonize_trt_cache" in {m["mountPath"] for m in container(trt)["volumeMounts"]}
    for rendered in (cpu, gpu):  # Python-backend shared memory, as compose's shm_size
        shm = {m["mountPath"]: m["name"] for m in container(rendered[k8s.DEPLOYMENT])["volumeMounts"]}["/dev/shm"]
        volumes = {v["name"]: v for v in rendered[k8s.DEPLOYMENT]["spec"]["template"]["spec"]["volumes"]}
        assert volumes[shm]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}


def test_hpa_asks_for_the_metric_the_adapter_rule_serves(cpu_repo) -> None:
    rendered = docs(spec_for(cpu_repo, target_queue_ms=12.5, min_replicas=3, max_replicas=9))
    (rule,) = rendered[k8s.ADAPTER_RULES]["rules"]
    assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}
    hpa = rendered[k8s.HPA]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == rule["name"]["as"] == k8s.QUEUE_METRIC
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "12500m"}  # 12.5 (ms)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "tinyemb"}
    # The rule: per pod (the HPA's Pods metric), from the series the seriesQuery finds.
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert re.fullmatch(rule["name"]["matches"], rule["seriesQuery"].split("{")[0])
    query = rule["metricsQuery"]
    assert query.count("<<.LabelMatchers>>") == 2 and query.count("<<.GroupBy>>") == 2
    # Its model matchers pick this repository's steps: every step's queue, the first step's requests,
    # never the ensemble (its figures would count the steps' twice).
    steps_re, first_re = re.findall(r'model=~"([^"]+)"', query)
    names = step_names("tinyemb")
    assert re.fullmatch(first_re, names["first"]) and not re.fullmatch(first_re, names["model"])
    for step in ("first", "model", "post"):
        assert re.fullmatch(steps_re, names[step])
    assert not re.fullmatch(steps_re, names["ensemble"]) and not re.fullmatch(first_re, names["ensemble"])
    # The HPA owns the count; the PDB and the Service select the pods the Deployment makes.
    deployment = rendered[k8s.DEPLOYMENT]
    assert "replicas" not in deployment["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for selector in (deployment["spec"]["selector"]["matchLabels"], rendered[k8s.PDB]["spec"]["selector"]["matchLabels"],
                     rendered[k8s.SERVICE]["spec"]["selector"]):
        assert selector.items() <= labels.items()
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ct.CONTAINER_PORTS["metrics"])


@pytest.mark.parametrize("claim", [None, "trt-engines"], ids=["emptydir", "claim"])
def test_tensorrt_engine_cache_is_a_volume_at_the_configs_path(claim, trt_repo) -> None:
    """TensorRT's engines at the path every TensorRT config names (spec.TENSORRT_CACHE): the pod's emptyDir by
    default (kept across container restarts), or a claim the server may write, one folder per release."""
    rendered = docs(spec_for(trt_repo, namespace="ml", trt_cache_pvc=claim))
    for version in K8S_VERSIONS:
        for name in k8s.APPLIED:
            assert kube_errors(rendered[name], version) == [], (name, version)
    assert kserve_errors(rendered[k8s.INFERENCE_SERVICE]) == []
    pod = rendered[k8s.DEPLOYMENT]["spec"]["template"]["spec"]
    mount = {m["mountPath"]: m for m in container(rendered[k8s.DEPLOYMENT])["volumeMounts"]}[TENSORRT_CACHE]
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    if claim is None:
        assert volume == {"name": mount["name"], "emptyDir": {}} and "subPath" not in mount
        assert "fsGroup" not in pod["securityContext"]
    else:
        # Writable (no readOnly), per release (an engine is one TensorRT version's), group-writable for uid 1000.
        assert volume == {"name": mount["name"], "persistentVolumeClaim": {"claimName": claim}}
        assert mount["subPath"] == f"triton-{ct.DEFAULT_TRITON_RELEASE}" and not mount.get("readOnly")
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"] == ct.IMAGE_UID
        assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
        assert pod["securityContext"]["runAsNonRoot"] is True
    # The KServe variant keeps the pod's emptyDir, and its container securityContext no pod-only field.
    model = rendered[k8s.INFERENCE_SERVICE]["spec"]["predictor"]["model"]
    kserve_mount = {m["mountPath"]: m for m in model["volumeMounts"]}[TENSORRT_CACHE]
    kserve_volumes = {v["name"]: v for v in rendered[k8s.INFERENCE_SERVICE]["spec"]["predictor"]["volumes"]}
    assert kserve_volumes[kserve_mount["name"]]["emptyDir"] == {} and "fsGroup" not in model["securityContext"]


def test_pod_is_restricted_and_drains_before_it_is_killed(cpu_repo) -> None:
    for source in SOURCES:
        deployment = docs(spec_for(cpu_repo, source))[k8s.DEPLOYMENT]
        pod = deployment["spec"]["template"]["spec"]
        # The restricted Pod Security Standard, container by container.
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"] + pod.get("initContainers", []):
            assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}} | (
                {"readOnlyRootFilesystem": True} if c["name"] == "api" else {})
        assert all(set(v) <= {"name", "emptyDir", "persistentVolumeClaim"} for v in pod["volumes"])
        args = container(deployment)["args"]
        assert "--model-control-mode=none" in args and not any(a.startswith("--load-model") for a in args)
        exit_s = int(next(a for a in args if a.startswith("--exit-timeout-secs=")).split("=")[1])
        prestop = container(deployment)["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pod["terminationGracePeriodSeconds"] > prestop + exit_s
        assert args == list(ct.triton_command(ServerOptions()))  # what compose and `deploy docker` run
    service = docs(spec_for(cpu_repo))[k8s.SERVICE]
    assert service["spec"]["type"] == "ClusterIP"
    assert {p["name"] for p in service["spec"]["ports"]} == {"http", "grpc", "api"}  # metrics stay on the pods
    # The Service's HTTP port is the API's front for Triton's /v2 routes, never Triton's own port.
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["http"]["port"] == ct.CONTAINER_PORTS["http"] and ports["http"]["targetPort"] == "api"


def test_the_pod_runs_the_container_compose_runs(cpu_repo) -> None:
    """The serving image's user, its health check, the load allowance and the stop grace are the pod's too,
    as the rendered Dockerfile and compose file spell them."""
    deployment = docs(spec_for(cpu_repo))[k8s.DEPLOYMENT]
    pod, triton = deployment["spec"]["template"]["spec"], container(deployment)
    image_user = [line for line in ct.render_dockerfile().splitlines() if line.startswith("USER ")][-1]
    assert image_user == f"USER {pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    compose = yaml.safe_load(ct.render_compose())["services"]["triton"]
    assert triton["readinessProbe"]["exec"]["command"] == compose["healthcheck"]["test"][1:] + ["--busy-ok"]
    startup = triton["startupProbe"]
    assert f"{startup['failureThreshold'] * startup['periodSeconds']}s" == compose["healthcheck"]["start_period"]
    prestop = triton["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert f"{pod['terminationGracePeriodSeconds'] - prestop}s" == compose["stop_grace_period"]


def test_the_api_runs_beside_triton_and_reads_the_same_repository(cpu_repo) -> None:
    """A second container: gRPC to Triton over localhost, ready when /health's real inference answers, the
    repository read-only from the pod's volume, or copied out of the model image by an init container."""
    for source in SOURCES:
        deployment = docs(spec_for(cpu_repo, source))[k8s.DEPLOYMENT]
        pod = deployment["spec"]["template"]["spec"]
        api = container(deployment, "api")
        args = api["args"]
        assert args[:2] == ["tritonize", "api"] and args[args.index("--grpc-url") + 1] == "127.0.0.1:8001"
        assert args[args.index("--workers") + 1] == "1"  # one process a pod, whatever tune wrote: replicas add more
        assert api["ports"] == [{"name": "api", "containerPort": k8s.API_PORT, "protocol": "TCP"}]
        assert api["readinessProbe"]["httpGet"] == {"path": "/health", "port": "api"}
        (mount,) = api["volumeMounts"]
        assert mount["mountPath"] == k8s.API_MODELS_DIR and mount["readOnly"] is True
        inits = {c["name"]: c for c in pod.get("initContainers", [])}
        if source == k8s.IMAGE:
            copy = inits["copy-repository"]
            assert copy["image"] == container(deployment)["image"] and mount["name"] == "api-models"
            assert copy["volumeMounts"] == [{"name": "api-models", "mountPath": "/api-models"}]
        else:
            assert "copy-repository" not in inits and mount["name"] == container(deployment)["volumeMounts"][-1]["name"]
    without = docs(k8s.k8s_spec(k8s.K8sOptions(repository=cpu_repo, api=False)))
    assert [c["name"] for c in without[k8s.DEPLOYMENT]["spec"]["template"]["spec"]["containers"]] == ["triton"]
    assert "initContainers" not in without[k8s.DEPLOYMENT]["spec"]["template"]["spec"]
    assert {p["name"] for p in without[k8s.SERVICE]["spec"]["ports"]} == {"grpc"}  # Triton's HTTP: only the front's


def test_init_container_fetches_checks_and_unpacks(cpu_repo, tmp_path) -> None:
    fetching = k8s.k8s_spec(k8s.K8sOptions(repository=cpu_repo, source=k8s.INIT, url="https://x/r.tar.gz")).fetch
    script = fetching.script
    assert script == (Path(k8s.__file__).parent / "fetch_repository.py").read_text()  # the module, verbatim
    archive = tmp_path / "repo.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(cpu_repo, arcname=".")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()

    def fetch(url: str, dest: Path, *sha: str) -> subprocess.CompletedProcess[str]:
        dest.mkdir()
        argv = [sys.executable, "-c", script, url, str(dest), fetching.health_file, *sha]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)

    ok = fetch(archive.as_uri(), tmp_path / "ok", digest.upper())
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ok" / "health.json").read_bytes() == (cpu_repo / "health.json").read_bytes()
    assert {p.relative_to(tmp_path / "ok") for p in (tmp_path / "ok").rglob("*")} == \
        {p.relative_to(cpu_repo) for p in cpu_repo.rglob("*")}
    bad = fetch(archive.as_uri(), tmp_path / "bad", "0" * 64)
    assert bad.returncode != 0 and "expected" in bad.stderr and not any((tmp_path / "bad").iterdir())
    wrong = tmp_path / "wrong.tar.gz"
    with tarfile.open(wrong, "w:gz") as tar:
        data = b"not a repository"
        info = tarfile.TarInfo("notes.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    empty = fetch(wrong.as_uri(), tmp_path / "empty")
    assert empty.returncode != 0 and "holds no health.json" in empty.stderr


# --------------------------------------------------------------------------- CLI


def test_deploy_py_renders_and_a_second_render_drops_stale_files(cpu_repo, tmp_path, capsys) -> None:
    out = tmp_path / "k8s"
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy.py"), "k8s", "render", "-r", str(cpu_repo), "-o", str(out), "-n", "ml"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert {p.name for p in out.iterdir()} == set(k8s.ALL_FILES)
    assert f"kubectl apply -k {out}" in result.stdout
    assert "kind load docker-image tritonize-tinyemb:" in result.stdout  # a local name: nothing to push it to
    assert main(["k8s", "render", "-r", str(cpu_repo), "-o", str(out), "--source", "pvc", "--pvc", "models",
                 "--image", "registry.example.com/ml/triton"]) == 0
    assert {p.name for p in out.iterdir()} == set(k8s.ALL_FILES) - {k8s.DOCKERFILE}
    assert container(yaml.safe_load((out / k8s.DEPLOYMENT).read_text()))["image"] == \
        f"registry.example.com/ml/triton:{ct.DEFAULT_TRITON_RELEASE}-py3"
    assert "docker push registry.example.com/ml/triton:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, expected",
    [
        (["-r", "{missing}"], "error: no model repository at"),
        (["-r", "{foreign}"], "has no tritonize.yaml"),
        (["--min-replicas", "0"], "error: --min-replicas must be at least 1 (got 0)"),
        (["--min-replicas", "4", "--max-replicas", "3"], "error: --max-replicas (3) is below --min-replicas (4)"),
        (["--target-queue-ms", "0"], "error: --target-queue-ms must be above 0"),
        (["--source", "pvc"], "error: --source pvc needs --pvc"),
        (["--pvc", "models"], "error: --pvc goes with --source pvc"),
        (["--source", "init", "--url", "ftp://x/r.tgz"], "error: --url must be an http(s) URL"),
        (["--memory", "4 GB"], "error: --memory '4 GB' is not a Kubernetes quantity"),
        (["--gpus", "1"], "was generated for CPU"),
        (["--name", "Not_A_Name"], "cannot name Kubernetes objects"),
        (["--namespace", "ML"], "is not a valid namespace"),
        (["--release", "latest"], "not a Triton release"),
        (["--trt-cache-pvc", "engines"], "error: --trt-cache-pvc: no model of"),
        (["--trt-cache-pvc", "Engines_1"], "error: --trt-cache-pvc 'Engines_1' is not a claim name"),
    ],
)
def test_bad_input_is_one_line(args, expected, cpu_repo, tmp_path, capsys) -> None:
    foreign = tmp_path / "foreign"
    (foreign / "model").mkdir(parents=True)  # a Triton repository tritonize did not write
    args = [a.format(missing=tmp_path / "missing", foreign=foreign) for a in args]
    if "-r" not in args:
        args = ["-r", str(cpu_repo), *args]
    assert main(["k8s", "render", "-o", str(tmp_path / "out"), *args]) == 2
    stderr = capsys.readouterr().err
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], stderr
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()
