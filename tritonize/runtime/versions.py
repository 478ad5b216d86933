"""Switch a running server to the version its repository now names, without refusing a request.

Triton keeps one config per model and pins nothing by itself: the ensemble's config pins every step to
one version, and each step serves its newest folder. `tritonize generate --version N` writes the new
folders and the new pin. The switch, through the model-repository API (explicit model control, behind
the instance's admin key), then:

1. loads each step with both versions (the old one keeps serving the ensemble still in memory);
2. loads the ensemble from its new config, so new requests go to version N of every step, while
   requests already inside the old ensemble finish on the old steps;
3. waits until the old ensemble has gone, then loads each step from its own config again, which retires
   the old version.

At no moment is a step the ensemble names missing, and no request mixes two versions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format

from ..errors import TritonizeError
from ..manifest import read_manifest
from ..repository import parse_config
from ..spec import CONFIG_FILE, FIRST_VERSION, LOCAL_CONFIG_DIR, repo_paths

READY = "READY"
RETIRE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Switch:
    """What a switch did: the version now served, what it replaced, and how long each phase took."""

    version: int
    previous: tuple[int, ...]
    load_s: float  # both versions of every step loaded
    retire_s: float  # the old versions gone
    changed: bool


def served_version(repository: Path) -> int:
    return read_manifest(repository).options.version or FIRST_VERSION


def step_config(folder: Path, config_name: str | None):
    """The config the server reads for a step: configs/<name>.pbtxt where the runtime selects one and it exists."""
    named = folder / LOCAL_CONFIG_DIR / f"{config_name}.pbtxt" if config_name else None
    path = named if named is not None and named.is_file() else folder / CONFIG_FILE
    return parse_config(path.read_text(), str(path))


def ready_versions(client, headers: dict[str, str]) -> dict[str, set[int]]:
    """Every model's READY versions, from the repository index."""
    found: dict[str, set[int]] = {}
    for row in client.get_model_repository_index(headers=headers):
        if row.get("state") == READY and str(row.get("version", "")).isdigit():
            found.setdefault(row["name"], set()).add(int(row["version"]))
    return found


def switch(
    http_url: str,
    repository: Path,
    config_name: str | None,
    headers: dict[str, str],
    say: Callable[[str], None] = lambda _: None,
) -> Switch:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    repository = Path(repository)
    manifest = read_manifest(repository)
    target = served_version(repository)
    paths = repo_paths(repository, manifest.name)
    steps = [paths[role] for role in ("model", "post", "tokenizer") if paths[role].is_dir()]
    if not (paths["ensemble"] / str(target)).is_dir():
        raise TritonizeError(f"{repository} names version {target}, but {paths['ensemble'].name}/{target}/ is missing")
    client = httpclient.InferenceServerClient(http_url.removeprefix("http://"), network_timeout=600.0)

    def load(name: str, config=None) -> None:
        try:
            client.load_model(name, headers=headers,
                              config=json_format.MessageToJson(config) if config is not None else None)
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
    for folder in steps:  # 1. both versions of each step
        config = step_config(folder, config_name)
        both = sorted(before.get(folder.name, set()) | {target})
        config.version_policy.specific.versions[:] = both
        say(f"loading {folder.name} versions {', '.join(map(str, both))}")
        load(folder.name, config)
    say(f"loading {manifest.name} version {target}")  # 2. new requests go to the new version
    load(manifest.name)
    loaded = time.monotonic()
    deadline = loaded + RETIRE_TIMEOUT_S  # 3. once the old ensemble has gone, each step keeps its new version only
    while set(previous) & ready_versions(client, headers).get(manifest.name, set()):
        if time.monotonic() > deadline:
            raise TritonizeError(f"the old version of {manifest.name} still answers after {RETIRE_TIMEOUT_S:.0f}s")
        time.sleep(0.1)
    for folder in steps:
        say(f"retiring the other versions of {folder.name}")
        load(folder.name, step_config(folder, config_name))
    now = ready_versions(client, headers)
    wrong = {name: sorted(v) for name, v in now.items() if name in {manifest.name, *(s.name for s in steps)} and v != {target}}
    if wrong:
        raise TritonizeError(f"after the switch the server has {wrong}, not version {target} only")
    return Switch(target, previous, round(loaded - start, 2), round(time.monotonic() - loaded, 2), changed=True)
