"""The manifests from a `K8sSpec`: templates/k8s/ rendered and written into one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import TritonizeError
from ..paths import TEMPLATES_DIR
from ..runtime import container
from .options import IMAGE, KSERVE_MODELS_DIR, QUEUE_METRIC
from .spec import K8sSpec

# -- files ------------------------------------------------------------------------------------------
DEPLOYMENT, SERVICE, HPA, PDB = "deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml"
KUSTOMIZATION = "kustomization.yaml"
ADAPTER_RULES = "prometheus-adapter-rules.yaml"
INFERENCE_SERVICE = "kserve-inferenceservice.yaml"
DOCKERFILE = "Dockerfile"
APPLIED = (DEPLOYMENT, SERVICE, HPA, PDB)  # what `kubectl apply -k` applies; the rest needs more installed
ALL_FILES = (*APPLIED, KUSTOMIZATION, ADAPTER_RULES, INFERENCE_SERVICE, DOCKERFILE)
TEMPLATE_DIR = "k8s"


def _to_yaml(value: Any) -> str:
    import yaml

    def plain(v: Any) -> Any:  # tuples and dataclass-held dicts as plain YAML
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return yaml.safe_dump(plain(value), sort_keys=False, width=1000).rstrip("\n")


def _template(name: str) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = _to_yaml
    env.filters["quote"] = json.dumps  # a JSON string is a YAML double-quoted scalar
    return env.get_template(f"{TEMPLATE_DIR}/{name}")


def render(spec: K8sSpec, output: Path = Path("k8s")) -> dict[str, str]:
    """File name -> text, for every file of this spec (the Dockerfile only where the image holds the repository);
    `output` is where they will be written (the build command in the Dockerfile names it)."""
    files = {name: f"{name}.j2" for name in (*APPLIED, KUSTOMIZATION, ADAPTER_RULES, INFERENCE_SERVICE)}
    if spec.source == IMAGE:
        files[DOCKERFILE] = f"{DOCKERFILE}.j2"
    context = {
        "spec": spec,
        "applied": APPLIED,
        "queue_metric": QUEUE_METRIC,
        "dockerfile": DOCKERFILE,
        "dockerfile_path": (Path(output) / DOCKERFILE).as_posix(),
        "label_prefix": container.LABEL_PREFIX,
        "kserve_models_dir": KSERVE_MODELS_DIR,
        "adapter_rules": ADAPTER_RULES,
        "inference_service": INFERENCE_SERVICE,
    }
    return {name: _template(template).render(**context) for name, template in files.items()}


def write(spec: K8sSpec, output: Path) -> list[Path]:
    """Write the files; remove those an earlier render wrote that this one does not (a stale Dockerfile)."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise TritonizeError(f"--output {output} exists and is not a folder")
    output.mkdir(parents=True, exist_ok=True)
    rendered = render(spec, output)
    for stale in set(ALL_FILES) - set(rendered):
        (output / stale).unlink(missing_ok=True)
    paths = []
    for name, text in rendered.items():
        (output / name).write_text(text)
        paths.append(output / name)
    return paths


def next_steps(spec: K8sSpec, output: Path) -> list[str]:
    """The commands that take the rendered folder to a serving cluster."""
    steps = [f"docker build -t {spec.serving_image} docker/   # the serving image, once per release"]
    if spec.model_image:
        steps.append(f"docker build -t {spec.model_image} -f {output / DOCKERFILE} {spec.repository}")
    pushed = spec.model_image or spec.serving_image
    if "/" in pushed.split(":")[0]:
        steps.append(f"docker push {pushed}")
    else:  # a local name: no registry to push to
        steps.append(f"kind load docker-image {pushed}   # or minikube image load; for a registry: --image REGISTRY/NAME")
    ns = f" -n {spec.namespace}" if spec.namespace else ""
    steps += [
        f"kubectl apply -k {output}",
        f"kubectl rollout status deployment/{spec.app}{ns}",
    ]
    return steps
