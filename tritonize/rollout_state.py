"""Rollouts of a new model version beside the served one: the state file, the routing rule, the bounds that roll a
canary back by themselves, and how a shadow's agreement is measured and gated.

`deploy.py local canary|shadow` writes `rollout.json` at the top of the repository (the state the repository on
disk serves: which version the model's own ensemble pins, which the candidate ensemble pins); the HTTP API reads
it, routes or mirrors requests, and records its verdicts and observations back into it where the repository is
writable (a read-only mount keeps them in the API's memory and metrics). Both writers hold an exclusive lock for
each read-modify-write.

A canary (rerankers, classifiers, re-exports of the same model) answers callers from either version; a shadow
(embedders: two embedders do not share a vector space) answers from the served version only, and the candidate's
answers are compared in the background.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from .errors import TritonizeError
from .spec import CANDIDATE_SUFFIX, ROLLOUT_FILE, VERSION_MANIFEST_FILE, repo_paths

CANARY, SHADOW = "canary", "shadow"
ACTIVE, ROLLED_BACK = "active", "rolled_back"
COSINE, NEIGHBOURS = "cosine", "neighbours"  # how a shadow's agreement is measured


@dataclass(frozen=True)
class Bounds:
    """When the API stops routing to a canary by itself."""

    min_requests: int = 20  # requests of the candidate before its error rate is judged
    max_error_rate: float = 0.05
    min_latency_requests: int = 50  # answers of each version before their p99s are compared
    latency_factor: float = 2.0  # the candidate's p99 over this times the served version's ...
    latency_slack_s: float = 0.05  # ... and over it by this much (a few ms of scheduling noise is no regression)
    window: int = 500  # the latest requests of each version judged


BOUNDS = Bounds()
NEIGHBOURS_K = 5  # rank overlap at k among the recent texts
RECENT_TEXTS = 64  # the texts a new model's neighbours are sought among
MIN_SHADOW_TEXTS = 20  # texts compared before a re-export's agreement may let it be promoted


@dataclass(frozen=True)
class Observed:
    """What the API measured of a rollout (written by the API, read by `status` and `promote`)."""

    requests: int = 0  # canary: requests answered by the candidate; shadow: texts mirrored and compared
    errors: int = 0
    p99_s: float | None = None  # the candidate's
    main_p99_s: float | None = None
    agreement: float | None = None  # shadow: mean cosine (re-export) or mean rank overlap at k (new model)
    agreement_min: float | None = None


@dataclass(frozen=True)
class Rollout:
    model: str
    kind: str  # CANARY | SHADOW
    main: int  # the version the model's own ensemble pins
    candidate: int  # the version the candidate ensemble pins
    percent: float  # canary: the weight routed to the candidate; shadow: the share of requests mirrored
    state: str = ACTIVE
    reason: str = ""  # why it was rolled back
    comparison: str = ""  # shadow: COSINE (a re-export of the same model) or NEIGHBOURS (a new model)
    gate: float | None = None  # shadow of a re-export: the least cosine that may be promoted
    observed: Observed = field(default_factory=Observed)

    @property
    def candidate_name(self) -> str:
        return candidate_name(self.model)

    @property
    def routed(self) -> bool:
        return self.state == ACTIVE

    @classmethod
    def from_dict(cls, data: dict) -> Rollout:
        return cls(**{**data, "observed": Observed(**data.get("observed", {}))})


def candidate_name(model: str) -> str:
    return model + CANDIDATE_SUFFIX


# -- the state file ------------------------------------------------------------------------------------------------
def rollout_file(repository: Path) -> Path:
    return Path(repository) / ROLLOUT_FILE


def read_rollouts(repository: Path) -> dict[str, Rollout]:
    """Every rollout in progress, by model; none where there is no file."""
    path = rollout_file(repository)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TritonizeError(f"{path} cannot be read: {exc}") from None
    return {name: Rollout.from_dict(entry) for name, entry in data.items()}


def _write(repository: Path, rollouts: dict[str, Rollout]) -> None:
    path = rollout_file(repository)
    if not rollouts:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({n: dataclasses.asdict(r) for n, r in rollouts.items()}, indent=2) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def editing(repository: Path) -> Iterator[dict[str, Rollout]]:
    """The rollouts, under an exclusive lock, written back (the file removed when none is left) on leaving."""
    lock = Path(repository) / f".{ROLLOUT_FILE}.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        rollouts = read_rollouts(repository)
        yield rollouts
        _write(repository, rollouts)


# -- routing -------------------------------------------------------------------------------------------------------
def to_candidate(percent: float, model: str, caller: str | None, rng: random.Random | None = None) -> bool:
    """Whether a request goes to the candidate: a caller who names itself always lands on the same side (its
    place in [0, 100) is a hash of the model and the caller), others at random."""
    if caller:
        digest = hashlib.sha256(f"{model}\0{caller}".encode()).digest()
        place = int.from_bytes(digest[:8], "big") / 2**64 * 100
    else:
        place = (rng or random).random() * 100
    return place < percent


# -- the bounds ----------------------------------------------------------------------------------------------------
def p99(latencies: Sequence[float]) -> float | None:
    return float(np.percentile(latencies, 99)) if len(latencies) else None


def breach(candidate: Sequence[tuple[bool, float]], main: Sequence[float], bounds: Bounds = BOUNDS) -> str | None:
    """Why a canary must stop being routed to, from its latest (answered, seconds) and the served version's latest
    latencies; None while it stays within the bounds."""
    if len(candidate) >= bounds.min_requests:
        errors = sum(1 for ok, _ in candidate if not ok)
        if errors / len(candidate) > bounds.max_error_rate:
            return (f"error rate {errors / len(candidate):.1%} over {len(candidate)} requests, over the bound of "
                    f"{bounds.max_error_rate:.0%}")
    answered = [s for ok, s in candidate if ok]
    if len(answered) >= bounds.min_latency_requests and len(main) >= bounds.min_latency_requests:
        mine, theirs = p99(answered), p99(main)
        if mine > bounds.latency_factor * theirs and mine - theirs > bounds.latency_slack_s:
            return (f"p99 {mine * 1e3:.1f} ms over {len(answered)} requests, over {bounds.latency_factor:g}x the "
                    f"served version's {theirs * 1e3:.1f} ms")
    return None


# -- a shadow's agreement ------------------------------------------------------------------------------------------
def cosines(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Each text's cosine between its two vectors."""
    old, new = np.asarray(old, np.float64), np.asarray(new, np.float64)
    norms = np.linalg.norm(old, axis=1) * np.linalg.norm(new, axis=1)
    return np.einsum("ij,ij->i", old, new) / np.maximum(norms, 1e-30)


def neighbours(vectors: np.ndarray, k: int) -> np.ndarray:
    """Each row's k nearest other rows by cosine, nearest first (ties by index)."""
    unit = np.asarray(vectors, np.float64)
    unit = unit / np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-30)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def rank_overlap(old: np.ndarray, new: np.ndarray, k: int = NEIGHBOURS_K) -> np.ndarray:
    """Per text, the share of its k nearest neighbours (among the same texts) both versions agree on. The two
    versions' vectors need not have the same size: each is compared within its own space."""
    k = min(k, len(old) - 1)
    if k < 1:
        return np.zeros(0)
    a, b = neighbours(old, k), neighbours(new, k)
    return np.array([len(set(x) & set(y)) / k for x, y in zip(a.tolist(), b.tolist())])


def version_manifest(repository: Path, model: str, version: int) -> dict | None:
    """The manifest entry a version was generated from (None for versions generated before it was kept)."""
    path = repo_paths(repository, model)["model"] / str(version) / VERSION_MANIFEST_FILE
    return yaml.safe_load(path.read_text()) if path.is_file() else None


# What may differ between two exports of the same model: how the graph is written and run, not what it computes.
EXPORT_OPTIONS = frozenset({"precision", "optimize", "tensorrt", "device", "version", "calibration", "output",
                            "max_batch_size", "max_queue_delay_us", "max_queue_size", "queue_budget_ms",
                            "capacity_rps", "api_workers", "tokenizer_instances", "model_instances", "gather_us", "buckets"})


def re_export(old: dict | None, new: dict | None) -> bool:
    """Whether two versions are exports of the same model: the same source folder read the same way (the resolved
    model and every option but how it is exported and batched)."""
    if old is None or new is None:
        return False
    keep = lambda entry: {k: v for k, v in entry.items() if k not in EXPORT_OPTIONS}  # noqa: E731
    return keep(old) == keep(new)


def cosine_gate(report: dict, default: float) -> float:
    """The least cosine the verification of a version held its graph to: its min_cosine check (fp16, int8), or
    `default` (generate's fp16 bound) where it was held to a max-abs bound (fp32)."""
    bounds = [stage["threshold"] for stage in report.get("stages", {}).values()
              if stage.get("metric") == "min_cosine"]
    return min(bounds) if bounds else default


def promotion_refusal(rollout: Rollout) -> str | None:
    """Why a shadow may not be promoted yet (None: it may)."""
    if rollout.kind != SHADOW or rollout.comparison != COSINE:
        return None
    seen = rollout.observed
    if seen.requests < MIN_SHADOW_TEXTS or seen.agreement_min is None:
        return (f"{rollout.model} version {rollout.candidate} has been compared on {seen.requests} texts; promoting "
                f"a re-export needs at least {MIN_SHADOW_TEXTS}")
    if seen.agreement_min < rollout.gate:
        return (f"{rollout.model} version {rollout.candidate} agrees with version {rollout.main} down to cosine "
                f"{seen.agreement_min:.6f}, below the verification gate of {rollout.gate:g}")
    return None
