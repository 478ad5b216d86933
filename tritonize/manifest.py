"""tritonize.yaml: the effective generate options plus what was read from the model folder, per model.

One reader for every consumer (reconfigure, tune, bench, the runtimes' summaries, the client scripts).
A repository of one model holds that model's entry as the whole file; a repository of several holds a
list of entries under `models`, in the order the models were added. Regenerating from an entry
(`tritonize generate --config tritonize.yaml [--name NAME]`) gives the same model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import tasks
from .errors import TritonizeError
from .spec import FIRST_VERSION, MANIFEST_FILE, MODELS_KEY, ModelSpec, Pipeline, served
from .spec.options import GenerateOptions

EARLIER_TOKENIZER = "python"  # what a manifest that names no tokenizer layout was served with

# Key that records what was read from the model folder (informational for --config, which ignores it).
RESOLVED_KEY = "resolved_model"
# Key that records the output statistics' baseline in brief (informational for --config, which ignores it).
BASELINE_KEY = "output_statistics"
# Key that records what the served ensemble can do beyond its task's plain answer (Pipeline.capabilities), so that
# the API reads it here rather than in the served files; informational for --config, which ignores it.
CAPABILITIES_KEY = "capabilities"


@dataclass(frozen=True)
class Manifest:
    options: GenerateOptions  # effective: name, task, max length and buckets filled in
    model: ModelSpec
    # The output statistics' baseline in brief: its source, rows and each histogram's bounds (the served version's;
    # each version's whole baseline is STATISTICS_FILE in its folders). None: a repository written before them.
    baseline: dict | None = None
    # What the served ensemble can do (Pipeline.capabilities); None: a repository written before they were recorded.
    capabilities: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.options.name or ""

    @property
    def pipeline(self) -> Pipeline:
        """The ensemble's shape as this model is served (its task's, with the tokenizer where its options put it)."""
        return served(tasks.of(self.model.head).pipeline, self.options.tokenizer, self.options.device)

    @property
    def version(self) -> int:
        """The version folder every model of the repository serves (repositories from before versions: 1)."""
        return self.options.version or FIRST_VERSION

    def to_dict(self) -> dict:
        data = self.options.to_dict()
        resolved = dataclasses.asdict(self.model)
        resolved["head"] = {"task": self.model.task, **resolved["head"]}
        data[RESOLVED_KEY] = resolved
        if self.baseline is not None:
            data[BASELINE_KEY] = self.baseline
        if self.capabilities is not None:
            data[CAPABILITIES_KEY] = list(self.capabilities)
        return data

    @classmethod
    def from_dict(cls, data: dict, origin: str = MANIFEST_FILE) -> Manifest:
        try:
            resolved = dict(data[RESOLVED_KEY])
            head_data = dict(resolved.pop("head"))
            head = tasks.contract_named(head_data.pop("task")).head_from_dict(head_data)
            resolved["input_names"] = tuple(resolved.get("input_names") or ())
            model = ModelSpec(head=head, **resolved)
            fields = set(GenerateOptions.field_names())
            # written before the graph tokenizer was the default: each tokenized in its Python step; before the
            # model step ran in runs: each ran its batches whole
            options = GenerateOptions(**{"tokenizer": EARLIER_TOKENIZER, "model_runs": False,
                                         **{k: v for k, v in data.items() if k in fields}})
        except (KeyError, TypeError, AttributeError, TritonizeError) as exc:
            raise TritonizeError(
                f"{origin} does not describe a repository this tritonize can read ({type(exc).__name__}: {exc})",
                hint="regenerate the repository with this tritonize",
            ) from exc
        capabilities = data.get(CAPABILITIES_KEY)
        return cls(options, model, data.get(BASELINE_KEY),
                   None if capabilities is None else tuple(str(c) for c in capabilities))


def entries(data: object, origin: str = MANIFEST_FILE) -> list[dict]:
    """Each model's entry of a tritonize.yaml, as written: the file itself for one model, else each of `models`."""
    if isinstance(data, dict) and MODELS_KEY in data:
        data = data[MODELS_KEY]
        if isinstance(data, list) and data and all(isinstance(entry, dict) for entry in data):
            return list(data)
    elif isinstance(data, dict):
        return [data]
    raise TritonizeError(f"{origin} does not describe a repository this tritonize can read",
                         hint="regenerate the repository with this tritonize")


def load_entries(repository: str | Path) -> list[dict] | None:
    """The raw entries of a repository's tritonize.yaml, or None where there is no such file."""
    path = Path(repository) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise TritonizeError(f"{path} is not valid YAML: {exc}") from exc
    return entries(data, str(path))


def find_manifests(repository: str | Path) -> list[Manifest]:
    """Every model's manifest, in the order the models were added; [] where the repository has no manifest."""
    raw = load_entries(repository)
    origin = str(Path(repository) / MANIFEST_FILE)
    return [Manifest.from_dict(entry, origin) for entry in raw or []]


def read_manifests(repository: str | Path) -> list[Manifest]:
    """Every model the repository serves (the HTTP API's catalog, the runtimes' summaries, the index files)."""
    manifests = find_manifests(repository)
    if not manifests:
        raise TritonizeError(f"{repository} has no {MANIFEST_FILE}", hint="generate the repository with tritonize first")
    return manifests


def choose(manifests: list[Manifest], name: str | None, repository: str | Path, flag: str = "--model") -> Manifest:
    """The named model, or the only one; ambiguity and unknown names are one line listing the models."""
    names = ", ".join(m.name for m in manifests)
    if name:
        for manifest in manifests:
            if manifest.name == name:
                return manifest
        raise TritonizeError(f"{repository} has no model {name!r} (it holds {names})", hint=f"pass {flag} with one of them")
    if len(manifests) > 1:
        raise TritonizeError(f"{repository} holds {len(manifests)} models ({names}): name one", hint=f"pass {flag} NAME")
    return manifests[0]


def read_manifest(repository: str | Path, name: str | None = None, flag: str = "--model") -> Manifest:
    """The named model's manifest, or the only model's (`flag` is what the error tells the user to pass)."""
    return choose(read_manifests(repository), name, repository, flag)
