"""The repository's index files: tritonize.yaml (every model's options), verification.json (every model's
report), health.json (every model's check) and README.md.

With one model each holds that model's entry alone, as repositories always have; with several, a list of
entries under MODELS_KEY. Adding a model or a version keeps the other models' entries as they were written.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from .. import tasks
from ..manifest import Manifest, load_entries
from ..serving import health
from ..serving.health import HEALTH_FILE
from ..spec import (
    MANIFEST_FILE,
    MODELS_KEY,
    README_FILE,
    VERIFICATION_FILE,
    VERSION_MANIFEST_FILE,
    RepoSpec,
    repo_paths,
)
from ..spec.options import GenerateOptions
from ..verify import VerificationReport
from .planning import fused_config_name, plan
from .rendering import RenderedFile, model_files, render_layout


@dataclass(frozen=True)
class IndexEntry:
    """One model's part of the repository's index files, as written: its tritonize.yaml entry, its
    verification report and its health check; and its RepoSpec, which the README describes."""

    repo: RepoSpec
    manifest: dict
    report: dict
    check: dict

    @property
    def name(self) -> str:
        return self.repo.name


# The index files, in the order they are replaced: the manifest last, since it says which models there are.
INDEX_FILES = (README_FILE, HEALTH_FILE, VERIFICATION_FILE, MANIFEST_FILE)


def index_entry(repo: RepoSpec, manifest: Manifest, report: VerificationReport) -> IndexEntry:
    return IndexEntry(repo, manifest.to_dict(), report.to_dict(), health_check(repo))


def render(repo: RepoSpec, manifest: Manifest, report: VerificationReport,
           index: list[IndexEntry] | tuple[IndexEntry, ...] = (), calibration: dict | None = None,
           statistics: dict | None = None) -> list[RenderedFile]:
    """Every text file of the model's folders, from templates/, and the index files over `index` (the other
    models of the repository, as read by `read_index`) with this model's entry in its place, or last."""
    entry = index_entry(repo, manifest, report)
    entries = [entry if e.name == repo.name else e for e in index]
    if repo.name not in {e.name for e in index}:
        entries.append(entry)
    return model_files(repo, report, calibration, statistics) + [version_manifest(repo, entry)] + index_files(entries)


def version_manifest(repo: RepoSpec, entry: IndexEntry) -> RenderedFile:
    """The manifest entry of the version being written, kept in its model step's folder: the index keeps only the
    newest version's, and a rollout compares the two versions it serves (tritonize/rollout_state.py)."""
    return RenderedFile(f"{repo.model_name}/{repo.version}/{VERSION_MANIFEST_FILE}",
                        yaml.safe_dump(entry.manifest, sort_keys=False))


def index_files(entries: list[IndexEntry]) -> list[RenderedFile]:
    """tritonize.yaml, verification.json, README.md and health.json: one model's entries alone, several listed."""
    several = len(entries) > 1
    options = {MODELS_KEY: [e.manifest for e in entries]} if several else entries[0].manifest
    report = {MODELS_KEY: {e.name: e.report for e in entries}} if several else entries[0].report
    checks = json.dumps(health.document([e.check for e in entries]), indent=2, ensure_ascii=False)
    models = [{"repo": e.repo, "sample_body": tasks.contract_of(e.repo.model.head).sample_body("hello")} for e in entries]
    layout = [
        (MANIFEST_FILE, "repository/tritonize.yaml.j2", {"options": options, "names": [e.name for e in entries]}),
        (VERIFICATION_FILE, "repository/verification.json.j2", {"report": report}),
        (README_FILE, "repository/README.md.j2", {"models": models}),
        (HEALTH_FILE, "repository/health.json.j2", {"health_json": checks}),
    ]
    return render_layout(layout, {"manifest_file": MANIFEST_FILE})


def health_check(repo: RepoSpec) -> dict:
    """One model's health check: the one-row request sent through its ensemble, and what it must answer."""
    request = json.loads(tasks.contract_of(repo.model.head).sample_body())
    return {"model": repo.name, "request": request, "outputs": [t.name for t in repo.outputs]}


def _read_json(path: Path) -> dict:
    """A JSON object from a file; {} where it is missing or unreadable (the index is then rebuilt from the models)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_index(output: Path) -> list[IndexEntry]:
    """Every model's entries in an existing repository's index files, as written: what adding a model or a
    version keeps. A report or check missing from the index is taken from the model's folder or rebuilt."""
    output = Path(output)
    raw = load_entries(output) or []
    manifests = [Manifest.from_dict(data, str(output / MANIFEST_FILE)) for data in raw]
    stored = _read_json(output / VERIFICATION_FILE)
    if MODELS_KEY in stored:
        reports = dict(stored[MODELS_KEY])
    else:  # a repository of one model: the file is its report
        reports = {manifests[0].name: stored} if stored and len(manifests) == 1 else {}
    checks = {c.get("model"): c for c in health.checks_of(_read_json(output / HEALTH_FILE)) if isinstance(c, dict)}
    entries = []
    for data, current in zip(raw, manifests):
        repo = plan(current.options, current.model, current.name, fused_config_name(output))
        report = reports.get(current.name) or _read_json(repo_paths(output, current.name)["model"] / str(repo.version)
                                                         / VERIFICATION_FILE) or VerificationReport.skipped_report().to_dict()
        entries.append(IndexEntry(repo, data, report, checks.get(current.name) or health_check(repo)))
    return entries


def manifest(options: GenerateOptions, repo: RepoSpec, statistics: dict | None = None) -> Manifest:
    """The effective options (what `--config` accepts) plus what was decided from the model folder, and the
    output statistics' baseline in brief (its source and each histogram's bounds)."""
    effective = dataclasses.replace(
        options,
        name=repo.name,
        task=repo.model.task,
        max_length=repo.model.max_length,
        buckets=list(repo.buckets),
        force=False,
        add=False,
    )
    return Manifest(effective, repo.model, baseline_summary(statistics) if statistics else None,
                    repo.pipeline.capabilities)


def baseline_summary(statistics: dict) -> dict:
    """What the manifest records of a version's baseline: where it came from and the histograms' bounds."""
    return {"source": statistics["source"], "rows": statistics["rows"],
            "bounds": {name: h["bounds"] for name, h in statistics["histograms"].items()}}
