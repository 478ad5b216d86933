"""Reading and validating what `tritonize k8s render` writes: parsed manifests, the official Kubernetes schemas
and KServe's CRD under strict field validation."""


from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from support import REPO_ROOT as ROOT
from tritonize import k8s

CRD = ROOT / "tests" / "data" / "kserve-inferenceservice-crd.yaml"
K8S_VERSIONS = ("1.37.0", "1.30.0")


def docs(spec: k8s.K8sSpec) -> dict[str, Any]:
    """File name -> parsed YAML (the Dockerfile as text)."""
    return {
        name: text if name == k8s.DOCKERFILE else yaml.safe_load(text)
        for name, text in k8s.render(spec).items()
    }


def kube_errors(doc: dict[str, Any], version: str = K8S_VERSIONS[0]) -> list[str]:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


def strict(schema: Any) -> Any:
    """A CRD schema as the API server's strict field validation reads it: unknown properties fail."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def crd_validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return jsonschema.Draft7Validator(strict(version["schema"]["openAPIV3Schema"]))


def kserve_errors(doc: dict[str, Any]) -> list[str]:
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator().iter_errors(doc)]
    # The CRD leaves metadata to the API server: Kubernetes' ObjectMeta (via a ConfigMap, which has nothing else).
    errors += kube_errors({"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc.get("metadata", {})})
    return errors


def container(deployment: dict[str, Any], name: str = "triton") -> dict[str, Any]:
    (found,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found
