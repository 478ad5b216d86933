"""Rendered files and artifacts -> the repository on disk, atomically.

Nothing reaches the output directory until every config has parsed into Triton's own `ModelConfig`
protobuf; a new repository is assembled in a temporary directory beside the output and swapped in by
rename, and the previous repository is put back if the swap fails. A model added beside others, or a
version beside others, is moved in folder by folder, the index files replaced last, so a server reading
the repository meanwhile sees the old state or the new one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from ..errors import TritonizeError
from ..manifest import load_entries, read_manifest
from ..spec import CONFIG_FILE, FIRST_VERSION, LABELS_FILE, MANIFEST_FILE, RUNS_MODEL_FILE, STATISTICS, RepoSpec
from ..spec.options import Overrides
from ..verify import VerificationReport
from .index import INDEX_FILES, IndexEntry, manifest, read_index, render
from .planning import fused_config_name, graph_refusal, plan
from .rendering import RenderedFile, parse_config, validate


def _owned(output: Path) -> bool:
    """True when `output` may be replaced: missing, empty (but dotfiles), or written by tritonize."""
    if not output.exists():
        return True
    if not output.is_dir():
        return False
    entries = [p for p in output.iterdir() if not p.name.startswith(".")]
    return not entries or (output / MANIFEST_FILE).is_file()


def _held(output: Path) -> list[str]:
    """The names of the models a repository holds, as its tritonize.yaml lists them ([] where it cannot be read)."""
    try:
        return [str(entry.get("name")) for entry in load_entries(output) or []]
    except TritonizeError:
        return []


def check_output(output: Path, force: bool) -> None:
    """Refuse to replace a directory tritonize did not write, or a repository of several models, unless forced."""
    if force:
        return
    if not _owned(output):
        raise TritonizeError(
            f"{output} exists and was not written by tritonize (no {MANIFEST_FILE})",
            hint="choose another --output, or pass --force to replace it",
        )
    held = _held(output)
    if len(held) > 1:
        raise TritonizeError(
            f"{output} holds {len(held)} models ({', '.join(held)}): writing a repository there would remove them",
            hint="--add puts a model beside them; --force replaces the repository; or choose another --output",
        )


def _is_empty(output: Path) -> bool:
    return not output.exists() or (output.is_dir() and not any(not p.name.startswith(".") for p in output.iterdir()))


def check_add(output: Path, repo: RepoSpec) -> list[IndexEntry]:
    """The index of the repository `repo` is added to, refused in one line where it cannot sit beside what is
    there; [] where `output` is missing or empty (the model starts a repository)."""
    output = Path(output)
    if _is_empty(output):
        return []
    if not _owned(output):
        raise TritonizeError(f"{output} exists and was not written by tritonize (no {MANIFEST_FILE}): --add only adds "
                             "to a tritonize repository", hint="choose another --output")
    index = read_index(output)
    names = [e.name for e in index]
    if repo.name in names:
        raise TritonizeError(f"{output} already holds a model named {repo.name!r} (models: {', '.join(names)})",
                             hint="choose another --name; for a new version of it, pass --version N instead of --add")
    folders = [repo.name, *(step.name for step in repo.steps)]
    taken = [f for f in folders if (output / f).exists()]
    if taken:
        raise TritonizeError(f"{output} already has a folder {taken[0]}/, which model {repo.name!r} needs for its "
                             f"steps ({', '.join(folders)})", hint="choose another --name")
    return index


def staging_dir(output: Path) -> Path:
    """A temporary directory on the output's filesystem, so the final swap is a rename."""
    output.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{output.name}.tritonize-", dir=output.parent))


def _move_dotfiles(source: Path, target: Path) -> None:
    for hidden in source.iterdir():  # keep dotfiles such as .gitkeep
        if hidden.name.startswith("."):
            os.replace(hidden, target / hidden.name)


def _place(binaries: dict[str, Path], root: Path, staging: Path) -> None:
    """Each file to its repository-relative path under `root`: moved when this run made it in `staging`, else copied."""
    for rel, source in binaries.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if staging in Path(source).parents:  # made by this run: move, do not copy
            os.replace(source, target)
        else:
            shutil.copy2(source, target)


def replace_file(path: Path, text: str | bytes) -> None:
    """Write beside, then rename over: a server loading the model reads the old file or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _assemble(files: list[RenderedFile], binaries: dict[str, Path], root: Path, staging: Path, version: int) -> Path:
    """The rendered files and the binaries under `root`, and every model's version folder (the ensemble's has
    no file, but must exist)."""
    root.mkdir(parents=True, exist_ok=True)
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.text, encoding="utf-8")
    _place(binaries, root, staging)
    for model_dir in {f.path.split("/")[0] for f in files if f.path.endswith(CONFIG_FILE)}:
        (root / model_dir / str(version)).mkdir(exist_ok=True)
    return root


def write(
    files: list[RenderedFile],
    binaries: dict[str, Path],
    output: Path,
    staging: Path,
    force: bool = False,
    version: int = FIRST_VERSION,
) -> Path:
    """Assemble the repository in `staging`, then swap it in place of `output`.

    `binaries` maps repository-relative paths to files to move in (ONNX graphs,
    tokenizer.json) or copy (served modules). A failure at any point leaves
    `output` as it was: if the final rename fails, the previous repository
    (moved aside inside `staging`) is put back before the error surfaces.
    """
    output = Path(output)
    check_output(output, force)
    validate(files)
    root = _assemble(files, binaries, staging / "repository", staging, version)
    if not output.exists():
        os.replace(root, output)
        return output
    _move_dotfiles(output, root)
    retired = staging / "previous"
    os.replace(output, retired)
    try:
        os.replace(root, output)
    except BaseException:
        os.replace(retired, output)
        _move_dotfiles(root, output)
        raise
    return output


def add_model(files: list[RenderedFile], binaries: dict[str, Path], output: Path, staging: Path,
              version: int = FIRST_VERSION) -> Path:
    """Add one model's folders beside the models of a repository, which a server may be serving.

    Nothing the repository holds changes but its index files: the model's folders are assembled in
    `staging` and renamed in (none of them exists: `check_add`), then the index files are replaced one by
    one, the manifest last. A failure at any point removes the folders moved in and puts every index file
    back as it was, byte for byte.
    """
    output = Path(output)
    validate(files)
    root = _assemble([f for f in files if f.path not in INDEX_FILES], binaries, staging / "model", staging, version)
    folders = sorted(p.name for p in root.iterdir())
    taken = [f for f in folders if (output / f).exists()]
    if taken:
        raise TritonizeError(f"{output} already has a folder {taken[0]}/", hint="choose another --name")
    index = sorted((f for f in files if f.path in INDEX_FILES), key=lambda f: INDEX_FILES.index(f.path))
    before = {f.path: (output / f.path).read_bytes() if (output / f.path).is_file() else None for f in index}
    moved: list[str] = []
    try:
        for folder in folders:
            os.replace(root / folder, output / folder)
            moved.append(folder)
        for f in index:
            replace_file(output / f.path, f.text)
    except BaseException:
        for rel, data in before.items():
            if data is None:
                (output / rel).unlink(missing_ok=True)
            else:
                replace_file(output / rel, data)
        for folder in moved:
            shutil.rmtree(output / folder, ignore_errors=True)
        raise
    return output


def _comparable(config: model_config_pb2.ModelConfig) -> dict:
    """A config without what versions may change: the version policy and the ensemble's pinned versions."""
    copy = model_config_pb2.ModelConfig()
    copy.CopyFrom(config)
    copy.ClearField("version_policy")
    for step in copy.ensemble_scheduling.step:
        step.model_version = -1
    return json_format.MessageToDict(copy, preserving_proto_field_name=True)


def _first_difference(old: object, new: object, path: str = "") -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    return f"{path}: {json.dumps(old)[:80]} -> {json.dumps(new)[:80]}"


def check_joins(files: list[RenderedFile], output: Path) -> None:
    """A new version must fit the configs the repository's versions share (Triton keeps one config per model,
    not per version): the same steps, tensors, batching and parameters, and the same labels."""
    for f in files:
        target = Path(output) / f.path
        if f.path.endswith(".pbtxt"):
            if not target.is_file():
                raise TritonizeError(f"this version needs {f.path}, which {output} does not have",
                                     hint="generate it as a new repository (another --output or --name)")
            old, new = (_comparable(parse_config(t, f.path)) for t in (target.read_text(), f.text))
            if old != new:
                raise TritonizeError(
                    f"this version cannot join {output}: {f.path} differs in {_first_difference(old, new)}",
                    hint="versions of one repository share their configs; generate a new repository (another --output)",
                )
        elif f.path.endswith(LABELS_FILE) and (not target.is_file() or target.read_text() != f.text):
            raise TritonizeError(f"this version cannot join {output}: its labels differ from {f.path}",
                                 hint="generate a new repository (another --output)")


def add_version(files: list[RenderedFile], binaries: dict[str, Path], output: Path, staging: Path, version: int) -> Path:
    """Add version folders beside those of a repository, which a server may be serving.

    Order keeps every moment servable: each new version folder is assembled in `staging` and renamed in
    (no server loads it yet), then the step configs, the ensemble's config (pinning the new version) and
    last the manifest are replaced file by file.
    """
    output = Path(output)
    configs = validate(files)
    check_joins(files, output)
    root = staging / "version"
    _place(binaries, root, staging)
    models = sorted({f.path.split("/")[0] for f in files if f.path.endswith(CONFIG_FILE)})
    for model_dir in models:
        (root / model_dir / str(version)).mkdir(parents=True, exist_ok=True)
        os.replace(root / model_dir / str(version), output / model_dir / str(version))
    ensemble = next(path for path, config in configs.items() if config.platform == "ensemble")
    last = {ensemble: 1, MANIFEST_FILE: 2}
    for f in sorted(files, key=lambda f: last.get(f.path, 0)):
        target = output / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(target, f.text)
    return output


def reconfigure(repo_dir: Path, overrides: Overrides, name: str | None = None) -> RepoSpec:
    """Re-render only the configs of one model of an existing repository (the only one, or `name`) with
    changed options (no re-export), and its entry of the manifest.

    Used by `tritonize tune`: batching, instance counts and buckets change;
    the ONNX graph, tokenizer and verification report stay as they are.
    """
    repo_dir = Path(repo_dir)
    current = read_manifest(repo_dir, name)
    index = read_index(repo_dir)
    options = overrides.apply(current.options)
    repo = plan(options, current.model, current.name, fused_config_name(repo_dir))
    if type(repo.pipeline) is not type(current.pipeline):  # other steps, other files: only generation writes them
        refusal = graph_refusal(options, current.model)
        raise TritonizeError(f"{current.name} tokenizes in ONNX graphs, and these options need the Python tokenizer "
                             f"step ({refusal.message if refusal else 'another layout'})",
                             hint="generate it again with --tokenizer python and these options")
    if repo.statistics_step and not (repo_dir / repo.statistics_step.name).is_dir():  # written before it had one
        repo = repo.without(STATISTICS)
    if repo.model_runs and not (repo_dir / repo.model_name / str(repo.version) / RUNS_MODEL_FILE).is_file():
        repo = dataclasses.replace(repo, model_runs=False)  # written before its model step ran in runs
    # Only the configs and the manifest are written: the report and the baseline stay as generation wrote them.
    kept = dataclasses.replace(manifest(options, repo), baseline=current.baseline)
    files = [f for f in render(repo, kept, VerificationReport.skipped_report(), index)
             if f.path.endswith(".pbtxt") or f.path == MANIFEST_FILE]
    validate(files)
    for f in files:
        replace_file(repo_dir / f.path, f.text)
    return repo
