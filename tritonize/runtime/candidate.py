"""A candidate version served beside the served one in a running server (`deploy.py local canary|shadow`): start,
promote and roll back a canary or shadow rollout. The rollout's state file and rules are tritonize/rollout_state.py's.

Triton pins an ensemble's steps in its one config, so the candidate version is served by an ensemble of its
own, `<name>_candidate`, pinned to it, while `<name>` stays pinned to the served version and each step serves
both. The repository on disk always says what is served: a restart serves the same two ensembles.

- start: the steps' configs name both versions and are loaded; `<name>`'s configs pin the served version again
  (generate wrote the new pin); `<name>_candidate/` is written and loaded; then the state file (rollout.json),
  from which the API starts routing (canary) or mirroring (shadow).
- promote: the rollout leaves the state file (the API stops sending to the candidate), the candidate ensemble is
  unloaded and removed, and the model switches to the new version as `switch` does (runtime/versions.py).
- rollback: the rollout leaves the state file, the candidate ensemble is unloaded and removed, and each step
  serves the old version alone again.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import TritonizeError
from ..manifest import read_manifest
from ..rollout_state import (
    CANARY,
    COSINE,
    NEIGHBOURS,
    SHADOW,
    Rollout,
    cosine_gate,
    editing,
    promotion_refusal,
    re_export,
    read_rollouts,
    version_manifest,
)
from ..spec import CONFIG_FILE, CONFIGS_DIR, LABELS_FILE, VERIFICATION_FILE, repo_paths
from ..spec.options import GenerateOptions
from ..tasks import of as task_of
from . import versions
from .versions import READY, replace_text, step_folders, with_versions

DRAIN_S = 1.0  # after the API reads the state file without the candidate, before the candidate is unloaded
Say = Callable[[str], None]


class Server:
    """A running server under model control: its HTTP URL, its repository and the admin headers."""

    def __init__(self, http_url: str, repository: Path, config_name: str | None, headers: dict[str, str], say: Say):
        import tritonclient.http as httpclient

        self.http_url, self.repository, self.config_name, self.headers, self.say = (
            http_url, Path(repository), config_name, headers, say)
        self.client = httpclient.InferenceServerClient(http_url.removeprefix("http://"), network_timeout=600.0)

    def load(self, name: str) -> None:
        from tritonclient.utils import InferenceServerException

        try:
            self.client.load_model(name, headers=self.headers)
        except InferenceServerException as exc:
            raise TritonizeError(f"loading {name} failed: {str(exc.message())[:300]}",
                                 hint="the server keeps serving what it served; read `deploy.py local logs`") from None

    def unload(self, name: str) -> None:
        self.client.unload_model(name, headers=self.headers)

    def ready(self) -> dict[str, set[int]]:
        return versions.ready_versions(self.client, self.headers, (READY,))


def config_files(folder: Path) -> list[Path]:
    """A model's configs for every variant: config.pbtxt and configs/*.pbtxt."""
    return [p for p in [folder / CONFIG_FILE, *sorted((folder / CONFIGS_DIR).glob("*.pbtxt"))] if p.is_file()]


def pinned(text: str, version: int) -> str:
    """An ensemble's config serving `version` and pinning every step to it."""
    return re.sub(r"^(\s*model_version:\s*)-?\d+", rf"\g<1>{version}", with_versions(text, [version]), flags=re.MULTILINE)


def renamed(text: str, name: str) -> str:
    return re.sub(r'^name:\s*".*"$', f'name: "{name}"', text, count=1, flags=re.MULTILINE)


def steps_of(repository: Path, model: str) -> list[Path]:
    return step_folders(repo_paths(repository, model))


def serve_steps(server: Server, steps: list[Path], served: list[int]) -> None:
    for folder in steps:
        for path in config_files(folder):
            replace_text(path, with_versions(path.read_text(), served))
        server.say(f"loading {folder.name} version(s) {', '.join(map(str, served))}")
        server.load(folder.name)


def start(server: Server, model: str | None, kind: str, version: int, percent: float) -> Rollout:
    """Serve `version` of the model beside the served one, as a canary (routed `percent`%) or a shadow (mirrored
    `percent`%)."""
    repository = server.repository
    manifest = read_manifest(repository, model)
    name, contract = manifest.name, task_of(manifest.model.head).contract
    if contract.rollout != kind:
        why = {SHADOW: f"{name} is a {contract.name} model, and two versions' vectors live in two spaces, so callers "
                       "must not get both; a shadow compares them instead",
               CANARY: f"{name} is a {contract.name} model, whose versions' answers callers may get side by side"}
        raise TritonizeError(f"no {kind} for {name}: " + (f"use `{contract.rollout}` ({why[contract.rollout]})"
                             if contract.rollout else f"{contract.name} models move to a new version with `switch`"))
    if not 0 < percent <= 100:
        raise TritonizeError(f"the {kind}'s share is {percent:g}%, and must be in (0, 100]")
    if version != manifest.version:
        raise TritonizeError(f"{repository} names version {manifest.version} of {name}, not {version}",
                             hint=f"write it first: tritonize generate ... --output {repository} --version {version}")
    if name in read_rollouts(repository):
        raise TritonizeError(f"a rollout of {name} is in progress", hint="promote or roll it back first")
    ensemble = repo_paths(repository, name)["ensemble"]
    served = server.ready().get(name, set())
    if len(served) != 1:
        raise TritonizeError(f"the server serves version(s) {sorted(served) or 'none'} of {name}, not one")
    (main,) = served
    if main == version:
        raise TritonizeError(f"the server already serves version {version} of {name}")
    steps = steps_of(repository, name)
    serve_steps(server, steps, sorted({main, version}))
    for path in config_files(ensemble):  # the served version, pinned on disk again
        replace_text(path, pinned(path.read_text(), main))
    rollout = Rollout(name, kind, main, version, percent)
    candidate = ensemble.with_name(rollout.candidate_name)
    (candidate / str(version)).mkdir(parents=True, exist_ok=True)
    for path in config_files(ensemble):
        target = candidate / path.relative_to(ensemble)
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_text(target, renamed(pinned(path.read_text(), version), rollout.candidate_name))
    if (ensemble / LABELS_FILE).is_file():
        shutil.copyfile(ensemble / LABELS_FILE, candidate / LABELS_FILE)
    server.say(f"loading {rollout.candidate_name} (version {version})")
    server.load(rollout.candidate_name)
    if kind == SHADOW:
        same = re_export(version_manifest(repository, name, main), version_manifest(repository, name, version))
        rollout = Rollout(name, kind, main, version, percent, comparison=COSINE if same else NEIGHBOURS,
                          gate=cosine_gate(verification(repository, name, version), GenerateOptions.min_cosine_fp16)
                          if same else None)
    with editing(repository) as rollouts:
        rollouts[name] = rollout
    return rollout


def verification(repository: Path, model: str, version: int) -> dict:
    import json

    path = repo_paths(repository, model)["model"] / str(version) / VERIFICATION_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def current(repository: Path, model: str | None) -> Rollout:
    name = read_manifest(repository, model).name
    found = read_rollouts(repository).get(name)
    if found is None:
        raise TritonizeError(f"no rollout of {name} is in progress")
    return found


def withdraw(server: Server, rollout: Rollout) -> None:
    """The rollout out of the state file, then, once the API has stopped sending to it, the candidate ensemble
    unloaded and its folder removed."""
    with editing(server.repository) as rollouts:
        rollouts.pop(rollout.model, None)
    time.sleep(DRAIN_S)
    server.say(f"unloading {rollout.candidate_name}")
    server.unload(rollout.candidate_name)
    shutil.rmtree(repo_paths(server.repository, rollout.model)["ensemble"].with_name(rollout.candidate_name),
                  ignore_errors=True)


def promote(server: Server, model: str | None) -> versions.Switch:
    rollout = current(server.repository, model)
    if not rollout.routed:
        raise TritonizeError(f"{rollout.model} version {rollout.candidate} was rolled back: {rollout.reason}",
                             hint="finish it with `rollback`")
    refusal = promotion_refusal(rollout)
    if refusal:
        raise TritonizeError(refusal)
    withdraw(server, rollout)
    ensemble = repo_paths(server.repository, rollout.model)["ensemble"]
    for path in config_files(ensemble):
        replace_text(path, pinned(path.read_text(), rollout.candidate))
    for folder in steps_of(server.repository, rollout.model):  # what generate wrote: the new version alone
        for path in config_files(folder):
            replace_text(path, with_versions(path.read_text(), [rollout.candidate]))
    return versions.switch(server.http_url, server.repository, server.config_name, server.headers, server.say,
                           rollout.model)


def rollback(server: Server, model: str | None) -> Rollout:
    rollout = current(server.repository, model)
    withdraw(server, rollout)
    serve_steps(server, steps_of(server.repository, rollout.model), [rollout.main])
    return rollout
