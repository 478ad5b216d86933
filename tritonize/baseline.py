"""The output statistics' baseline: what a repository's own served steps answer on a sample of texts.

Recorded at generation, before the repository is written: the rendered model runs in this process as its
ensemble chains it (chain.py, the served modules configured from the repository's own configs), each
statistic the task declares is computed by the function the served steps count with (its `statistics_module`,
read through serving/statistics.py), and its bounds are the sample's quantiles. Each counting step's version
folder gets the whole record (STATISTICS_FILE); the manifest gets its source and bounds.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from . import chain
from .errors import TritonizeError
from .paths import DATA_DIR
from .repository import RenderedFile
from .serving.statistics import baseline, declared
from .spec import RepoSpec
from .tasks.task import text_lines

CORPUS = DATA_DIR / "corpus_mixed.txt"  # the shipped corpus (the bench's mixed workload)
CORPUS_TEXTS = 200  # texts of the shipped corpus beside the verification rows
DEFAULT_SOURCE = "verification texts and the shipped corpus"
BATCH_ROWS = 32


def baseline_rows(task, path: str | None) -> tuple[str, list[tuple[str, ...]]]:
    """(source, request rows) of the baseline: the verification rows and CORPUS_TEXTS of the shipped corpus, or
    the non-blank lines of `path`. A file that cannot be read, or of fewer than two rows, is refused in one line."""
    if path is None:
        corpus = [t for t in CORPUS.read_text(encoding="utf-8").splitlines() if t.strip()][:CORPUS_TEXTS]
        return DEFAULT_SOURCE, list(task.verifier.verification_rows()) + task.peer.baseline_rows(corpus)
    texts = text_lines(path, "--baseline")
    if len(texts) < 2:
        raise TritonizeError(f"--baseline {path} holds {len(texts)} non-blank line(s): a distribution needs more",
                             hint="give a text file of the texts you will serve, one per line, hundreds of them")
    return Path(path).name, task.peer.baseline_rows(texts, lines=True)


def _lay_out(files: list[RenderedFile], binaries: dict[str, Path], root: Path) -> None:
    """The rendered repository under `root`, its binaries linked, not copied (read here, never served)."""
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.text, encoding="utf-8")
    for rel, source in binaries.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(Path(source).resolve(), target)


def _answered(steps, rows: list[tuple[str, ...]]) -> list[dict]:
    """The outputs of one batch of rows; where the batch is refused (a row the served steps refuse, as they
    would refuse that request), of each row that is answered alone."""
    try:
        return [steps(rows).outputs]
    except Exception:  # noqa: BLE001 - the served steps' own refusal of one row; the others still count
        if len(rows) == 1:
            return []
        return [a for row in rows for a in _answered(steps, [row])]


def record(repo: RepoSpec, files: list[RenderedFile], binaries: dict[str, Path], rows: list[tuple[str, ...]],
           source: str, workdir: Path) -> dict:
    """What the served steps answer on `rows`, as STATISTICS_FILE records it."""
    _lay_out(files, binaries, workdir)
    steps = chain.in_process(workdir, name=repo.name)
    statistics = dict(repo.statistics)
    ordered = sorted(rows, key=lambda row: sum(map(len, row)))  # batches of like lengths: little padding
    answers = [a for k in range(0, len(ordered), BATCH_ROWS) for a in _answered(steps, ordered[k:k + BATCH_ROWS])]
    if not answers:
        raise TritonizeError(f"none of the {len(rows)} baseline rows ({source}) could be answered",
                             hint="give --baseline a file of texts this model serves")
    modules = [repo.statistics_module] if repo.statistics_module else []
    known = declared(modules)
    missing = sorted(set(statistics) - set(known))
    if missing:
        raise TritonizeError(f"the task counts {', '.join(missing)}, which {modules or 'no module'} declares")
    context: dict = {"labels": list(repo.labels)}
    for name in statistics:
        if known[name].context:
            key, make = known[name].context
            context[key] = make(np.concatenate([a[statistics[name]] for a in answers]))
    # Each batch's values, then joined: padded tensors (a sparse encoder's terms) differ in width per batch.
    histograms = {name: baseline(name, reads, np.concatenate([known[name].values(a[reads], context) for a in answers])
                                 ).to_dict()
                  for name, reads in statistics.items() if known[name].histogram}
    counters = {name: {"reads": reads} for name, reads in statistics.items() if not known[name].histogram}
    return {"model": repo.name, "source": source, "rows": len(rows), "modules": modules, "histograms": histograms,
            "counters": counters, **{k: v for k, v in context.items() if v is not None}}

