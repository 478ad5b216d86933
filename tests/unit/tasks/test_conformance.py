"""The conformance kit (tests/support/conformance.py) over every entry of the registry, and over a task written
outside tritonize (a copy of tests/plugins/tritonize_shout) registered the way an installed package is: each is planned on a
tiny folder it serves, its configs parse into Triton's ModelConfig, its served modules resolve, its statistics have
their panels and rules, and its first route answers its own sample body through a stub of Triton."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import conformance
from tritonize import serving, tasks

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "tritonize_shout"
PACKAGE = "kit_shout"  # the plugin's copy, under a name no other test registers (the registry caches by names)
PLUGIN_TASK = "shout"
KITTED = sorted(tasks.NAMES) + [PLUGIN_TASK]
# The plugin serves what the embedding task serves, where --task names it.
FOLDERS = {**conformance.FOLDER_OF_TASK, PLUGIN_TASK: conformance.FOLDER_OF_TASK["embedding"]}


def forget(*prefixes: str) -> None:
    import sys

    for name in [m for m in sys.modules if m.startswith(prefixes)]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """The registry with a copy of the plugin registered, as its entry point registers it; undone after."""
    import shutil
    import sys

    root = tmp_path_factory.mktemp("plugin")
    shutil.copytree(PLUGIN, root / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    packages, path, names = list(tasks.PACKAGES), list(serving.__path__), list(sys.path)
    forget("tritonize.serving.shout")
    sys.path.insert(0, str(root))
    tasks.register(PACKAGE)
    yield root / PACKAGE
    tasks.PACKAGES[:] = packages
    serving.__path__[:] = path
    sys.path[:] = names
    forget(PACKAGE, "tritonize.serving.shout")


@pytest.fixture(scope="module")
def planned(registry, tmp_path_factory) -> dict[str, conformance.Planned]:
    root = tmp_path_factory.mktemp("kit")
    found = {}
    for task in KITTED:
        folder = conformance.build_folder(task, FOLDERS[task], root / task)
        found[task] = conformance.plan(task, folder, root / task / "repo")
    return found


def test_the_kit_covers_every_registered_task(registry) -> None:
    assert set(KITTED) == set(tasks.NAMES) and PLUGIN_TASK in tasks.NAMES


@pytest.mark.parametrize("task", KITTED)
def test_the_build_side_answers_what_the_read_side_reads(planned, task: str) -> None:
    conformance.outputs_agree(planned[task])


@pytest.mark.parametrize("task", KITTED)
def test_every_config_parses_into_tritons_schema(planned, task: str) -> None:
    configs = conformance.configs_parse(planned[task])
    spec = planned[task].spec
    assert {path.split("/")[0] for path in configs} == {spec.name, *(s.name for s in spec.steps)}


@pytest.mark.parametrize("task", KITTED)
def test_the_served_modules_resolve(registry, planned, task: str) -> None:
    files = conformance.served_modules_resolve(planned[task])
    if task == PLUGIN_TASK:  # its post step is its own package's module
        assert files[f"{conformance.NAME}_post/1/model.py"] == registry / "served" / "shout.py"


@pytest.mark.parametrize("task", KITTED)
def test_the_statistics_are_published(planned, task: str) -> None:
    names = conformance.statistics_published(planned[task])
    assert bool(names) == bool(tasks.contract_named(task).statistics_module)


@pytest.mark.parametrize("task", KITTED)
def test_the_first_route_answers_through_a_stub_of_triton(planned, task: str, tmp_path: Path) -> None:
    route, status = conformance.route_answers(planned[task], tmp_path)
    assert status == 200 and route.startswith("/")
