"""Switch a running server to the version its repository now names, without refusing a request.

Versions are per model: in a repository of several models, each model has its own version folders and
its own pin, and a switch moves one model (`--model NAME`) while the others keep serving.

Triton keeps one config per model and pins nothing by itself: the ensemble's config pins every step to
one version, and each step serves its newest folder. `tritonize generate --version N` writes the new
folders and the new pin. The switch, through the model-repository API (explicit model control, behind
the instance's admin key), then:

1. loads each step with both versions (the old one keeps serving the ensemble still in memory);
2. loads the ensemble from its new config, so new requests go to version N of every step, while
   requests already inside the old ensemble finish on the old steps;
3. waits until the old ensemble has gone, then loads each step from its own config again, which retires
   the old version.

Triton 2.51 reloads an ensemble's steps from their folders whenever it loads the ensemble, whatever
config a step was last loaded with; so in step 1 the steps' config files themselves name both
versions for the time of the switch, and step 3 puts back what `generate` wrote. At no moment is a
step the ensemble names missing, and no request mixes two versions.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import TritonizeError
from ..manifest import read_manifest
from ..repository import parse_config, replace_file
from ..spec import CONFIG_FILE, CONFIGS_DIR, ENSEMBLE, ROLES, repo_paths

READY = "READY"
STILL_SERVING = (READY, "UNLOADING")
RETIRE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Switch:
    """What a switch did: the version now served, what it replaced, and how long each phase took."""

    version: int
    previous: tuple[int, ...]
    load_s: float  # both versions of every step loaded
    retire_s: float  # the old versions gone
    changed: bool


def step_folders(paths: dict[str, Path]) -> list[Path]:
    """The folders of a model's steps (repo_paths), those it has, in the order a switch loads them: the steps after
    the first, then the first step, whatever roles the model's pipeline declares (the ensemble names each)."""
    return [paths[role.key] for role in (*ROLES[1:], ROLES[0]) if paths[role.key].is_dir()]


def config_file(folder: Path, config_name: str | None) -> Path:
    """The config the server reads for a model: configs/<name>.pbtxt where the runtime selects one and it exists."""
    named = folder / CONFIGS_DIR / f"{config_name}.pbtxt" if config_name else None
    return named if named is not None and named.is_file() else folder / CONFIG_FILE


def with_versions(text: str, versions: list[int]) -> str:
    """A config's text serving `versions`: its version_policy line replaced (added where it has none)."""
    policy = f"version_policy: {{ specific: {{ versions: [ {', '.join(map(str, versions))} ] }} }}"
    changed, found = re.subn(r"^version_policy:.*$", policy, text, flags=re.MULTILINE)
    return changed if found else text.rstrip("\n") + "\n" + policy + "\n"


def replace_text(path: Path, text: str) -> None:
    parse_config(text, str(path))  # never leave a config Triton cannot read
    replace_file(path, text)


def ready_versions(client, headers: dict[str, str], states: tuple[str, ...] = (READY,)) -> dict[str, set[int]]:
    """Every model's versions in one of `states` (READY by default), from the repository index."""
    found: dict[str, set[int]] = {}
    for row in client.get_model_repository_index(headers=headers):
        if row.get("state") in states and str(row.get("version", "")).isdigit():
            found.setdefault(row["name"], set()).add(int(row["version"]))
    return found


def switch(
    http_url: str,
    repository: Path,
    config_name: str | None,
    headers: dict[str, str],
    say: Callable[[str], None] = lambda _: None,
    model: str | None = None,
) -> Switch:
    """Switch `model` (the repository's only model, or the named one); the repository's other models keep
    serving as they are."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    repository = Path(repository)
    manifest = read_manifest(repository, model)
    target = manifest.version
    paths = repo_paths(repository, manifest.name)
    steps = step_folders(paths)
    if not (paths[ENSEMBLE] / str(target)).is_dir():
        raise TritonizeError(f"{repository} names version {target}, but {paths[ENSEMBLE].name}/{target}/ is missing")
    client = httpclient.InferenceServerClient(http_url.removeprefix("http://"), network_timeout=600.0)

    def load(name: str) -> None:
        try:
            client.load_model(name, headers=headers)
        except InferenceServerException as exc:
            raise TritonizeError(f"loading {name} failed: {str(exc.message())[:300]}",
                                 hint="the server keeps serving what it served; read `deploy.py local logs`") from None

    try:
        before = ready_versions(client, headers)
    except InferenceServerException as exc:
        if "explicit" in str(exc.message()) or "not allowed" in str(exc.message()):
            raise TritonizeError("the server does not allow model control") from None
        raise TritonizeError(f"the model-repository API refused: {exc.message()}",
                             hint="is this the server's admin key? `deploy.py local` reads it from the run directory") from None
    previous = tuple(sorted(before.get(manifest.name, set()) - {target}))
    if before.get(manifest.name) == {target} and all(before.get(s.name) == {target} for s in steps):
        return Switch(target, (), 0.0, 0.0, changed=False)
    start = time.monotonic()
    written = {folder: config_file(folder, config_name) for folder in steps}
    originals = {folder: path.read_text() for folder, path in written.items()}
    try:
        for folder in steps:  # 1. both versions of each step
            both = sorted(before.get(folder.name, set()) | {target})
            replace_text(written[folder], with_versions(originals[folder], both))
            say(f"loading {folder.name} versions {', '.join(map(str, both))}")
            load(folder.name)
        say(f"loading {manifest.name} version {target}")  # 2. new requests go to the new version
        load(manifest.name)
        loaded = time.monotonic()
        deadline = loaded + RETIRE_TIMEOUT_S  # 3. once the old ensemble has gone, each step keeps its new version only
        # UNLOADING still runs the requests it holds: they need the old steps until it is gone.
        while set(previous) & ready_versions(client, headers, STILL_SERVING).get(manifest.name, set()):
            if time.monotonic() > deadline:
                raise TritonizeError(f"the old version of {manifest.name} still answers after {RETIRE_TIMEOUT_S:.0f}s")
            time.sleep(0.1)
    finally:
        for folder, path in written.items():  # what generate wrote, whatever happened
            replace_text(path, originals[folder])
    for folder in steps:
        say(f"retiring the other versions of {folder.name}")
        load(folder.name)
    now = ready_versions(client, headers)
    wrong = {name: sorted(v) for name, v in now.items() if name in {manifest.name, *(s.name for s in steps)} and v != {target}}
    if wrong:
        raise TritonizeError(f"after the switch the server has {wrong}, not version {target} only")
    return Switch(target, previous, round(loaded - start, 2), round(time.monotonic() - loaded, 2), changed=True)
