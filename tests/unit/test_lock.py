"""requirements.lock against pyproject.toml, requirements.in and the environment the suite runs in.

`make install` installs the lock, hash-checked; pyproject.toml keeps ranges for people who install the
package into their own environment. These tests fail when the two stop agreeing, so a dependency moves only
through `make lock`.
"""

from __future__ import annotations

import os
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support import REPO_ROOT as ROOT
from tritonize.lockfile import SERVING_IMAGE_LOCK, differences, installed, read_lock

LOCK = ROOT / "requirements.lock"
PROJECT = "tritonize"
# What the venv brings itself (pip) and the project's own editable install: not in the lock.
NOT_LOCKED = {"pip", PROJECT}


@pytest.fixture(scope="module")
def pins():
    return read_lock(LOCK)


def project_requirements() -> list[Requirement]:
    """pyproject.toml's dependencies and those of the dev extra, the extras it names expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    found, todo, seen = [Requirement(r) for r in project["dependencies"]], ["dev"], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in extras[extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == PROJECT:
                todo.extend(req.extras)
            else:
                found.append(req)
    return found


def input_requirements() -> list[Requirement]:
    lines = (ROOT / "requirements.in").read_text().splitlines()
    return [Requirement(line) for line in (raw.split("#", 1)[0].strip() for raw in lines) if line]


def test_every_declared_requirement_is_locked_at_a_version_it_allows(pins) -> None:
    declared = project_requirements() + input_requirements()
    assert len(declared) > 10
    for req in declared:
        if req.marker and not req.marker.evaluate():
            continue
        pin = pins.get(canonicalize_name(req.name))
        assert pin is not None, f"{req} is declared but not in requirements.lock: run `make lock`"
        assert req.specifier.contains(pin.version, prereleases=True), \
            f"requirements.lock pins {pin.requirement}, outside {req}: run `make lock`"


def test_every_pin_has_hashes_and_the_lock_is_closed(pins) -> None:
    """Each pin is needed by something declared, and everything a pin needs is pinned at a version it allows."""
    assert all(pin.hashes for pin in pins.values())
    needed: dict[str, set[str]] = {}
    todo = [(canonicalize_name(r.name), set(r.extras)) for r in project_requirements() + input_requirements()
            if not r.marker or r.marker.evaluate()]
    while todo:
        name, extras = todo.pop()
        if name in needed and extras <= needed[name]:
            continue
        needed[name] = needed.get(name, set()) | extras
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in needed[name] | {""}):
                continue
            dep = canonicalize_name(req.name)
            assert dep in pins, f"{name} needs {req}, which requirements.lock lacks: run `make lock`"
            assert req.specifier.contains(pins[dep].version, prereleases=True), \
                f"{name} needs {req}, and requirements.lock pins {pins[dep].requirement}"
            todo.append((dep, set(req.extras)))
    assert set(pins) - set(needed) == set(), "pinned but needed by nothing declared: run `make lock`"


@pytest.mark.skipif(os.environ.get("TRITONIZE_UNLOCKED") == "1", reason="make test-latest runs unlocked on purpose")
def test_the_suite_runs_from_the_lock(pins) -> None:
    have = installed()
    assert differences(pins, have) == []
    assert set(have) - set(pins) - NOT_LOCKED == set(), "installed but not locked"


def test_the_serving_image_adds_what_the_generator_uses(pins) -> None:
    image = read_lock(SERVING_IMAGE_LOCK)
    assert list(image) == ["pillow", "tokenizers"]  # Pillow: the image-text step decodes images
    for name in image:
        assert image[name].version == pins[name].version and image[name].hashes
        assert set(image[name].hashes) <= set(pins[name].hashes)


def test_the_api_image_installs_the_locked_versions_of_tritonize_api(pins) -> None:
    """docker/api.Dockerfile installs this lock: tritonize[api]'s closure, each at requirements.lock's version."""
    from tritonize.lockfile import API_IMAGE_LOCK

    image = read_lock(API_IMAGE_LOCK)
    assert {"fastapi", "uvicorn", "orjson", "tritonclient", "tokenizers", "setuptools"} <= set(image)
    assert "torch" not in image and "sentence-transformers" not in image
    assert {name: pin.version for name, pin in image.items()} == {name: pins[name].version for name in image}
    assert all(pin.hashes for pin in image.values())


def test_differences_name_what_moved() -> None:
    from tritonize.lockfile import Pin

    locked = {"a": Pin("a", "1.0", ("0" * 64,)), "b": Pin("b", "2.0", ("1" * 64,)), "c": Pin("c", "3.0", ())}
    assert differences(locked, {"a": "1.0", "b": "2.1"}) == [
        "b: locked 2.0, installed 2.1 (newer)", "c: locked 3.0, not installed"]
