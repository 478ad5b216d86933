"""tritonize.yaml: the effective generate options plus what was read from the model folder.

One reader for every consumer (reconfigure, tune, bench, the runtimes' summaries, the client scripts).
Regenerating from the file (`tritonize generate --config tritonize.yaml`) gives the same repository.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import tasks
from .errors import TritonizeError
from .spec import FIRST_VERSION, MANIFEST_FILE, GenerateOptions, ModelSpec

# Key that records what was read from the model folder (informational for --config, which ignores it).
RESOLVED_KEY = "resolved_model"


@dataclass(frozen=True)
class Manifest:
    options: GenerateOptions  # effective: name, task, max length and buckets filled in
    model: ModelSpec

    @property
    def name(self) -> str:
        return self.options.name or ""

    @property
    def version(self) -> int:
        """The version folder every model of the repository serves (repositories from before versions: 1)."""
        return self.options.version or FIRST_VERSION

    def to_dict(self) -> dict:
        data = self.options.to_dict()
        resolved = dataclasses.asdict(self.model)
        resolved["head"] = {"task": self.model.task, **resolved["head"]}
        data[RESOLVED_KEY] = resolved
        return data

    @classmethod
    def from_dict(cls, data: dict, origin: str = MANIFEST_FILE) -> Manifest:
        try:
            resolved = dict(data[RESOLVED_KEY])
            head_data = dict(resolved.pop("head"))
            head = tasks.get(head_data.pop("task")).head_from_dict(head_data)
            resolved["input_names"] = tuple(resolved.get("input_names") or ())
            model = ModelSpec(head=head, **resolved)
            fields = set(GenerateOptions.field_names())
            options = GenerateOptions(**{k: v for k, v in data.items() if k in fields})
        except (KeyError, TypeError, AttributeError, TritonizeError) as exc:
            raise TritonizeError(
                f"{origin} does not describe a repository this tritonize can read ({type(exc).__name__}: {exc})",
                hint="regenerate the repository with this tritonize",
            ) from exc
        return cls(options, model)


def find_manifest(repository: str | Path) -> Manifest | None:
    """The repository's manifest, or None where there is none."""
    path = Path(repository) / MANIFEST_FILE
    if not path.is_file():
        return None
    return Manifest.from_dict(yaml.safe_load(path.read_text()) or {}, str(path))


def read_manifest(repository: str | Path) -> Manifest:
    manifest = find_manifest(repository)
    if manifest is None:
        raise TritonizeError(f"{repository} has no {MANIFEST_FILE}", hint="generate the repository with tritonize first")
    return manifest
