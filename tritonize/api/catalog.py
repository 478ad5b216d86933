"""The models the API serves, read once from the repository's manifest at start: every model of it.

A route asks for a model by name (OpenAI's and Cohere's `model`) or, where the client sends none
(text-embeddings-inference's routes), for the one model of the task the route serves.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ..manifest import Manifest, read_manifests
from ..spec import FIRST, REQUEST_CUTS, TOKENIZER_FILE, repo_paths
from ..tasks import TaskContract, contract_of
from .errors import ApiError


@dataclass(frozen=True)
class ServedModel:
    """One ensemble of the repository, as the routes need it."""

    manifest: Manifest
    repository: Path

    @property
    def name(self) -> str:
        return self.manifest.name

    @functools.cached_property
    def contract(self) -> TaskContract:
        """Its task's contract: how its answers read (the API never builds or verifies a repository); read once,
        as every route asks it several times a request."""
        return contract_of(self.manifest.model.head)

    @property
    def head(self):
        return self.manifest.model.head

    @property
    def prompts(self) -> dict[str, str]:
        """The prompts the folder declares by name (sentence-transformers' `prompts`); a head that reads none
        declares none."""
        return dict(getattr(self.head, "prompts", ()))

    @property
    def max_length(self) -> int:
        return self.manifest.model.max_length

    @property
    def max_batch_size(self) -> int:
        """Texts per Triton request: the ensemble's max batch size."""
        return int(self.manifest.options.max_batch_size or 1)

    @property
    def tokenizer_file(self) -> Path:
        """The tokenizer the served step runs (for /tokenize, and to count a long text's windows; inference never
        tokenizes here)."""
        return repo_paths(self.repository, self.name)[FIRST.key] / str(self.manifest.version) / TOKENIZER_FILE

    @property
    def version_dir(self) -> Path:
        """The served version's folder of the model step (what generation recorded beside its graph)."""
        return repo_paths(self.repository, self.name)["model"] / str(self.manifest.version)

    @property
    def cut_refusal(self) -> str | None:
        """Why the served ensemble cannot cut a request's texts at their start or into windows (request
        parameters the Python tokenizer step reads); None where it can: its manifest says so."""
        capabilities = self.manifest.capabilities
        if self.tokenizes_in_graph:
            return ("it tokenizes in ONNX graphs, which read every text from its start (generate it with --tokenizer "
                    "python for its Python step, which cuts as a request asks)")
        if capabilities is not None and REQUEST_CUTS in capabilities:
            return None
        if capabilities is None:
            return ("it was written by an earlier tritonize, whose manifest does not say that its tokenizer step cuts "
                    "texts (generate the repository again)")
        return f"its {self.contract.name} steps read every text from its start"

    @property
    def tokenizes_in_graph(self) -> bool:
        return self.manifest.options.tokenizer == "graph"

    def refuse_unreadable(self, inputs) -> None:
        """A text with a NUL character is refused where the ensemble tokenizes in graphs: Triton hands strings to
        onnxruntime NUL-terminated, so the graph would read the text only up to it (docs/options.md)."""
        if self.tokenizes_in_graph and any("\x00" in text for texts in inputs.values() for text in texts
                                           if isinstance(text, str)):
            raise ApiError(422, "a text holds a NUL character (\\x00), which this model's tokenizer graph cannot "
                           "read past: remove it, or generate the model with --tokenizer python", None,
                           "invalid_value")

    @property
    def created(self) -> int:
        try:
            return int(self.tokenizer_file.stat().st_mtime)
        except OSError:
            return 0


@dataclass(frozen=True)
class Catalog:
    models: tuple[ServedModel, ...]

    @classmethod
    def read(cls, repository: str | Path) -> Catalog:
        root = Path(repository).resolve()
        return cls(tuple(ServedModel(manifest, root) for manifest in read_manifests(root)))

    def find_any(self, name: str | None = None) -> ServedModel:
        """The named model of any task; without a name, the only model served (an empty name names none)."""
        if name is not None:
            return self._named(name)
        return self._only(self.models, "models")

    def find(self, tasks: TaskContract | tuple[TaskContract, ...], name: str | None = None) -> ServedModel:
        """The named model, which must serve one of `tasks`; without a name, the only model of them."""
        tasks = tasks if isinstance(tasks, tuple) else (tasks,)
        if name is not None:
            found = self._named(name)
            if found.contract not in tasks:
                raise ApiError(400, f"the model {name!r} is a {found.contract.name} model, and this route serves "
                               f"{' or '.join(t.name for t in tasks)} models", "model", "wrong_model_type")
            return found
        what = " or ".join(t.name for t in tasks)
        of_tasks = tuple(m for task in tasks for m in self.of_task(task))
        if not of_tasks:
            raise ApiError(424, f"no {what} model is served here "
                           f"(served: {', '.join(f'{m.name} ({m.contract.name})' for m in self.models)})", "model")
        return self._only(of_tasks, f"{what} models")

    def of_task(self, task: TaskContract) -> tuple[ServedModel, ...]:
        return tuple(m for m in self.models if m.contract is task)

    def _named(self, name: str) -> ServedModel:
        for model in self.models:
            if model.name == name:
                return model
        raise ApiError(404, f"the model {name!r} does not exist; served: "
                       f"{', '.join(m.name for m in self.models)}", "model", "model_not_found")

    @staticmethod
    def _only(models: tuple[ServedModel, ...], what: str) -> ServedModel:
        if len(models) != 1:
            raise ApiError(400, f"several {what} are served "
                           f"({', '.join(m.name for m in models)}): name one with `model`", "model")
        return models[0]
