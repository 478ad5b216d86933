"""The tasks tritonize serves, one package each: a new task is a package and one line of PACKAGES, or, outside
tritonize, a package that an installed distribution names under the `tritonize.tasks` entry point.

A task package holds both sides of the task, loaded apart: `contract.py` (how its answers read), `calls.py` (the
client's calls) and `api.py` (its HTTP routes, handlers and bodies) never load what builds; `task.py` (the `Task`:
detection, export, verification) is imported only when a build asks for it (`get`, `of`, `detect`, `choose`).
What Triton runs for it beyond the shared steps, its served modules, is its `served/` folder (see tritonize.serving).
Nothing outside this package branches on a task's name.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .. import serving
from ..errors import TritonizeError
from ..serving.batching import ROW_FIELDS
from ..serving.statistics import Statistic, declared
from ..spec import Head, TaskOption
from .contract import TaskContract

if TYPE_CHECKING:
    from ..folder import ModelFolder
    from .calls import Call
    from .task import Task

# The registry: every task's package, in the one order tasks are listed in (`--task`, hints, the API's route
# table; where two tasks serve one route, as a reranker and a late-interaction model the ranking routes, the first
# is named first). Where several tasks' detect() claim a folder, their `specificity` decides, not this order.
# `register` adds one at run time (a package outside tritonize).
PACKAGES: list[str] = [f"{__name__}.{package}" for package in (
    "embedding", "rerank", "multi_vector", "classification", "sparse_embedding", "token_classification",
    "question_answering", "image_text",
)]


# Installed task packages outside tritonize: `[project.entry-points."tritonize.tasks"] <name> = "<package>"`.
ENTRY_POINTS = "tritonize.tasks"


# What each side of a task package declares at module level (found by name), and which of them it must: a name
# close to one of these that is not one (a misspelled SCORER would otherwise do nothing) fails when the side is
# loaded, naming it; so does a missing one.
DECLARATIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "contract": (frozenset({"CONTRACT"}), frozenset({"CONTRACT"})),
    "task": (frozenset({"TASK", "OPTIONS", "CONTRACT"}), frozenset({"TASK"})),
    "calls": (frozenset({"CALLS", "CONTRACT"}), frozenset({"CALLS"})),
    "api": (frozenset({"ROUTES", "ROUTERS", "SCORER", "IMAGES", "CONTRACT"}), frozenset({"ROUTES", "ROUTERS"})),
}


def _join_served(package: str) -> None:
    """Serve the modules of the package's served/ folder, where it has one, as tritonize.serving's."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise TritonizeError(f"no package {package} to register")
    for location in spec.submodule_search_locations or ():
        folder = Path(location) / serving.SERVED_FOLDER
        if folder.is_dir():
            try:
                serving.add_served(folder)
            except ValueError as exc:
                raise TritonizeError(f"{package}: {exc}") from None


for _package in PACKAGES:
    _join_served(_package)


@functools.lru_cache(maxsize=None)
def checked(side: str, found: ModuleType) -> ModuleType:
    """The side, once every declaration it must make is there and none is misspelled (once per module)."""
    known, required = DECLARATIONS[side]
    missing = sorted(required - set(vars(found)))
    if missing:
        raise TritonizeError(f"{found.__name__} declares no {', '.join(missing)}",
                             hint=f"a task's {side}.py declares {', '.join(sorted(known))}")
    for name in vars(found):
        if name.isupper() and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            if close:
                raise TritonizeError(f"{found.__name__} declares {name}, which tritonize does not read: "
                                     f"{close[0]} is meant?", hint=f"a task's {side}.py declares "
                                                                   f"{', '.join(sorted(known))}")
    return found


def register(package: str) -> None:
    """Serve the task of an importable package (its contract.py, task.py and, where it has them, calls.py, api.py
    and served/), after those already listed. Its read sides are loaded and checked here; task.py when a build
    asks."""
    if package in PACKAGES:
        return
    served = list(serving.__path__)
    try:
        _join_served(package)  # first: its contract may read its served modules
        _contract_side(package)
        for side in ("contract", "calls", "api"):
            module(package, side)  # checked as it loads
    except BaseException:
        serving.__path__[:] = served  # a package refused serves nothing
        raise
    PACKAGES.append(package)


def register_installed() -> None:
    """Add every task package an installed distribution names under ENTRY_POINTS, by entry name. Its served
    modules join now; its sides load, and are checked, when first read (here, while tritonize is still being
    imported, its api.py could not import the API)."""
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        if entry.module not in PACKAGES:
            _join_served(entry.module)
            PACKAGES.append(entry.module)



def module(package: str, side: str) -> ModuleType | None:
    """One side of a task's package (contract, task, calls, api); None where the package has no such module."""
    name = f"{package}.{side}"
    try:
        found = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # the module exists and an import inside it failed: that is a bug, not an absence
            raise
        return None
    return checked(side, found) if side in DECLARATIONS else found


def sides(side: str) -> tuple[ModuleType, ...]:
    """That side of every task that has one, in registry order."""
    return _sides(side, tuple(PACKAGES))


@functools.lru_cache(maxsize=None)
def _sides(side: str, packages: tuple[str, ...]) -> tuple[ModuleType, ...]:
    """Read once per registry (the API asks on every request)."""
    return tuple(m for m in (module(p, side) for p in packages) if m is not None)


def contracts() -> dict[str, TaskContract]:
    """Every task's contract by task name: what clients, the API and the benchmark's readers use."""
    return dict(_contracts(tuple(PACKAGES)))


@functools.lru_cache(maxsize=None)
def _contracts(packages: tuple[str, ...]) -> dict[str, TaskContract]:
    return {m.CONTRACT.name: m.CONTRACT for m in map(_contract_side, packages)}


def _contract_side(package: str) -> ModuleType:
    found = module(package, "contract")
    if found is None:
        raise TritonizeError(f"{package} has no contract.py: it is not a task package")
    return found


def statistics() -> dict[str, Statistic]:
    """Every statistic the registered tasks count (each from its `statistics_module`), and each text's tokens,
    by name: what the dashboard and the drift rules are written from."""
    modules = dict.fromkeys(c.statistics_module for c in contracts().values() if c.statistics_module)
    return declared(tuple(modules))


def unknown(name: str) -> TritonizeError:
    return TritonizeError(f"unknown task {name!r}", hint=f"use one of: {', '.join(contracts())}")


def package_of(name: str) -> str:
    """The package of the task of that name."""
    try:
        return _packages(tuple(PACKAGES))[name]
    except KeyError:
        raise unknown(name) from None


@functools.lru_cache(maxsize=None)
def _packages(packages: tuple[str, ...]) -> dict[str, str]:
    return {_contract_side(p).CONTRACT.name: p for p in packages}


def contract_named(name: str) -> TaskContract:
    """The contract of the task of that name, without loading what builds it."""
    try:
        return _contracts(tuple(PACKAGES))[name]
    except KeyError:
        raise unknown(name) from None


def contract_of(head: Head) -> TaskContract:
    """The contract of the task a head belongs to, without loading what builds it."""
    return contract_named(head.task)


def get(name: str) -> Task:
    """The task (its build side: task.py, imported here)."""
    return module(package_of(name), "task").TASK  # type: ignore[union-attr]


def of(head: Head) -> Task:
    """The task a head belongs to."""
    return get(head.task)


def tasks() -> dict[str, Task]:
    """Every task's build side, by name (imports every task.py)."""
    return {name: get(name) for name in contracts()}


def _what(folder: ModelFolder) -> str:
    if folder.late_interaction:
        return f"{folder.late_interaction.removeprefix('a ')} ({folder.architecture or folder.model_type})"
    if folder.is_cross_encoder:
        return f"sentence-transformers CrossEncoder ({folder.architecture})"
    if folder.is_sparse_encoder:
        return f"sentence-transformers SparseEncoder ({folder.architecture or folder.model_type})"
    if folder.modules is not None:
        return f"sentence-transformers folder ({folder.architecture or folder.model_type})"
    return folder.architecture or f"{folder.model_type} model without architectures"


def supported() -> str:
    return "; ".join(f"{t.name}: {t.serves}" for t in tasks().values())


def detect(folder: ModelFolder) -> Task:
    """The task of a folder's own head, or one line that says what was found and what is supported."""
    claimed = [t for t in tasks().values() if t.detector.detect(folder)]
    top = max((t.detector.specificity for t in claimed), default=0)
    claimed = [t for t in claimed if t.detector.specificity == top]  # the most specific claim serves it
    if len(claimed) == 1:
        return claimed[0]
    if claimed:  # two tasks claiming one folder as specifically is a bug in their detect(), never a guess
        raise TritonizeError(f"{_what(folder)} is claimed by {', '.join(t.name for t in claimed)}")
    raise TritonizeError(f"tritonize cannot serve a {_what(folder)} exactly", hint=f"it serves {supported()}")


def choose(folder: ModelFolder, requested: str | None) -> Task:
    """The folder's own task; a --task that contradicts the folder's head is refused, never obeyed."""
    if not requested:
        return detect(folder)
    task = get(requested)
    if not task.detector.accepts(folder):
        try:
            own = f"its head is {detect(folder).name}"
        except TritonizeError:
            own = "tritonize cannot serve its head"
        raise TritonizeError(
            f"--task {requested} contradicts the folder: a {_what(folder)} ({own})",
            hint=f"{task.name} serves {task.serves}",
        )
    return task


def for_outputs(names: list[str] | tuple[str, ...], inputs: list[str] | tuple[str, ...] | None = None) -> TaskContract:
    """The contract of the task whose ensemble returns these outputs (clients read them from the server's metadata);
    where several tasks return the same (an embedder's and an image-text model's `embedding`), the one that takes
    these `inputs`, else the first registered."""
    answers = set(names) - set(ROW_FIELDS)  # every tokenizing ensemble also reports its rows' tokens
    found = [c for c in contracts().values() if set(c.output_names) == answers]
    if inputs is not None and len(found) > 1:
        found = [c for c in found if {t.name for t in c.text_inputs} == set(inputs)] or found
    if found:
        return found[0]
    raise TritonizeError(f"no task returns the outputs {sorted(names)}", hint="is this a tritonize repository?")


def build_side(package: str, names: tuple[str, ...]):
    """A task package's module __getattr__: task.py's names, imported only when asked, so that importing the
    package (or its contract) never loads what builds."""

    def __getattr__(name: str):
        if name in names:
            return getattr(importlib.import_module(f"{package}.task"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def options() -> tuple[TaskOption, ...]:
    """Every task's own options of `tritonize generate` (GenerateOptions and its flags gather them), read from
    each task's options.py: a manifest reader (the API) loads no task.py for them."""
    return tuple(o for side in sides("options") for o in side.OPTIONS)


def client_calls() -> dict[str, Call]:
    """Every task's client calls by name (tritonize/tasks/calls.py), in registry order; a name declared by two
    tasks is refused, never one of them silently chosen."""
    found: dict[str, Call] = {}
    for side in sides("calls"):
        for call in side.CALLS:
            if call.__name__ in found:
                raise TritonizeError(f"two tasks declare the client call {call.__name__!r} ({side.__name__})")
            found[call.__name__] = call
    return found


def __getattr__(name: str):
    """TASKS (every task's build side), NAMES, SUPPORTED and OPTIONS, read from the registry when asked."""
    if name == "TASKS":
        return tasks()
    if name == "NAMES":
        return tuple(contracts())
    if name == "SUPPORTED":
        return supported()
    if name == "OPTIONS":  # every task's own options of `tritonize generate`, in registry order
        return options()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TaskContract", "TASKS", "NAMES", "OPTIONS", "PACKAGES", "ENTRY_POINTS", "register", "register_installed",
           "statistics", "contracts", "contract_of", "get", "of",
           "detect", "choose", "for_outputs", "client_calls", "build_side"]


register_installed()
