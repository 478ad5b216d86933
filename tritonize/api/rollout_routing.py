"""The API's side of a rollout (tritonize/rollout_state.py): which ensemble answers a request, the canary's bounds judged
on the requests it answers, and a shadow's agreement measured in the background.

The state file is read again whenever it changes (one stat per request). A canary is routed its weight of a
model's requests, sticky per caller where the request names one (CALLER_HEADER); a request the candidate fails
(anything but the caller's own fault) is answered by the served version instead, and counted against the
candidate. Verdicts and observations are written back into the state file where the repository is writable,
and kept in this process otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..rollout_state import (
    BOUNDS,
    CANARY,
    COSINE,
    RECENT_TEXTS,
    ROLLED_BACK,
    SHADOW,
    Observed,
    Rollout,
    breach,
    cosines,
    editing,
    p99,
    rank_overlap,
    read_rollouts,
    rollout_file,
    to_candidate,
)

CALLER_HEADER = "X-Caller-Id"  # a canary's caller: the same value always lands on the same version
CALLER_FAULTS = frozenset({400, 413, 422})  # refusals of the request itself, which the served version would refuse too
PERSIST_EVERY_S = 1.0
REFRESH_S = 0.005  # the state file is stat'ed at most this often: a rollout written is routed within it
log = logging.getLogger("tritonize.api.rollout")


@dataclass(frozen=True)
class Target:
    """The ensemble a request goes to and the version it serves."""

    name: str
    version: int
    candidate: bool = False


@dataclass
class Tally:
    """What this process measured of one rollout."""

    candidate: deque  # (answered, seconds) of the candidate's latest requests
    main: deque  # seconds of the served version's latest answers
    requests: int = 0
    errors: int = 0
    agreements: int = 0
    agreement_sum: float = 0.0
    agreement_min: float | None = None
    recent: deque | None = None  # a new model's shadow: (old vector, new vector) of the latest texts

    def observed(self) -> Observed:
        return Observed(self.requests, self.errors, p99([s for ok, s in self.candidate if ok]), p99(self.main),
                        self.agreement_sum / self.agreements if self.agreements else None, self.agreement_min)


class Rollouts:
    def __init__(self, repository: Path, registry, served: Callable[[str], int]):
        from prometheus_client import Counter, Gauge, Histogram

        self.repository = Path(repository)
        self._file = str(rollout_file(self.repository))  # stat'ed per request: a string, no Path built each time
        self.served = served  # a model's version where no rollout is in progress
        self.by_model: dict[str, Rollout] = {}
        self.tallies: dict[tuple[str, int], Tally] = {}
        self.verdicts: dict[tuple[str, int], str] = {}  # (model, candidate) -> why this process stopped routing
        self._stamp: int | None = None
        self._checked = -REFRESH_S
        self._persisted = 0.0
        self._writable = True
        self._flush_pending = False
        self._background: set[asyncio.Task] = set()
        self.percent = Gauge("tritonize_api_rollout_percent", "The percent of a model's requests routed (canary) or "
                             "mirrored (shadow) to its candidate version; 0 once rolled back",
                             ("model", "version", "kind"), registry=registry, multiprocess_mode="mostrecent")
        self.rolled_back = Counter("tritonize_api_rollout_rolled_back", "Canaries this API stopped routing to, "
                                   "their error rate or p99 over the bounds", ("model", "version"), registry=registry)
        self.shadow_requests = Counter("tritonize_api_shadow_requests", "Requests mirrored to a shadow version, by "
                                       "outcome (answered, failed)", ("model", "version", "outcome"),
                                       registry=registry)
        self.agreement = Histogram("tritonize_api_shadow_agreement", "Per text, a shadow version's agreement with the "
                                   "served one: cosine of the two vectors (a re-export) or rank overlap at k of the "
                                   "nearest neighbours among recent texts (a new model)",
                                   ("model", "version", "comparison"), registry=registry,
                                   buckets=(0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 0.9999, 0.99999, 1.0))

    # -- the state file ---------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < REFRESH_S:
            return
        self._checked = now
        try:
            stamp = os.stat(self._file).st_mtime_ns
        except OSError:
            stamp = None
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            found = read_rollouts(self.repository)
        except Exception as exc:  # noqa: BLE001 - a half-written file is read again at its next change
            log.warning("rollout state unreadable, keeping the last one read: %s", exc)
            return
        self.by_model = found
        self.percent.clear()
        for r in found.values():
            self.tallies.setdefault((r.model, r.candidate), self._tally(r))
            self.percent.labels(r.model, str(r.candidate), r.kind).set(r.percent if self.routed(r) else 0)

    def _tally(self, rollout: Rollout) -> Tally:
        recent = deque(maxlen=RECENT_TEXTS) if rollout.kind == SHADOW and rollout.comparison != COSINE else None
        return Tally(deque(maxlen=BOUNDS.window), deque(maxlen=BOUNDS.window), recent=recent)

    def routed(self, rollout: Rollout) -> bool:
        return rollout.routed and (rollout.model, rollout.candidate) not in self.verdicts

    def persist(self, rollout: Rollout, force: bool = False) -> None:
        """This process's observations (and verdict) into the state file, at most once a second."""
        now = time.monotonic()
        if not self._writable:
            return
        if not force and now - self._persisted < PERSIST_EVERY_S:
            if not self._flush_pending:  # the latest observations reach the file even when requests stop
                self._flush_pending = True
                asyncio.get_running_loop().call_later(PERSIST_EVERY_S, self._flush, rollout)
            return
        self._persisted = now
        tally = self.tallies[(rollout.model, rollout.candidate)]
        verdict = self.verdicts.get((rollout.model, rollout.candidate))
        try:
            with editing(self.repository) as rollouts:
                written = rollouts.get(rollout.model)
                if written is None or written.candidate != rollout.candidate:
                    return  # promoted or rolled back meanwhile
                rollouts[rollout.model] = replace(written, observed=tally.observed(), **(
                    {"state": ROLLED_BACK, "reason": verdict} if verdict and written.routed else {}))
        except OSError as exc:
            self._writable = False
            log.warning("the repository is read-only here (%s): rollout verdicts and observations stay in this "
                        "API's memory and metrics", exc)

    def _flush(self, rollout: Rollout) -> None:
        self._flush_pending = False
        self.persist(rollout, force=True)

    # -- a canary ---------------------------------------------------------------------------------------------------
    def target(self, model: str, caller: str | None) -> Target:
        self.refresh()
        rollout = self.by_model.get(model)
        if rollout is None:
            return Target(model, self.served(model))
        if rollout.kind == CANARY and self.routed(rollout) and to_candidate(rollout.percent, model, caller):
            return Target(rollout.candidate_name, rollout.candidate, candidate=True)
        return Target(model, rollout.main)

    def served_target(self, model: str) -> Target:
        """The model's own ensemble, at the version it pins."""
        rollout = self.by_model.get(model)
        return Target(model, rollout.main if rollout else self.served(model))

    def record(self, model: str, target: Target, answered: bool, seconds: float) -> None:
        """One answer (or failure) of a version; a candidate past the bounds stops being routed to."""
        rollout = self.by_model.get(model)
        if rollout is None or rollout.kind != CANARY:
            return
        tally = self.tallies[(model, rollout.candidate)]
        if not target.candidate:
            if answered:
                tally.main.append(seconds)
            return
        tally.requests += 1
        tally.errors += not answered
        tally.candidate.append((answered, seconds))
        key = (model, rollout.candidate)
        reason = None if key in self.verdicts else breach(tally.candidate, tally.main)
        if reason:
            self.verdicts[key] = reason
            self.rolled_back.labels(model, str(rollout.candidate)).inc()
            self.percent.labels(model, str(rollout.candidate), rollout.kind).set(0)
            log.warning("canary %s version %d rolled back: %s; requests go to version %d only (finish with "
                        "`deploy.py local canary rollback --model %s`)", model, rollout.candidate, reason,
                        rollout.main, model)
        self.persist(rollout, force=bool(reason))

    # -- a shadow ---------------------------------------------------------------------------------------------------
    def mirror(self, model: str, vectors: np.ndarray,
               candidate_vectors: Callable[[str], Awaitable[np.ndarray]]) -> None:
        """Mirror this request to the model's shadow with its share's probability, in the background: the caller
        already has its answer, and never sees the shadow's. The state is as `target` read it for this request."""
        rollout = self.by_model.get(model)
        if rollout is None or rollout.kind != SHADOW or not self.routed(rollout) or random.random() * 100 >= rollout.percent:
            return
        task = asyncio.get_running_loop().create_task(self._compare(rollout, vectors, candidate_vectors))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _compare(self, rollout: Rollout, old: np.ndarray,
                       candidate_vectors: Callable[[str], Awaitable[np.ndarray]]) -> None:
        version = str(rollout.candidate)
        tally = self.tallies[(rollout.model, rollout.candidate)]
        try:
            new = await candidate_vectors(rollout.candidate_name)
        except Exception as exc:  # noqa: BLE001 - a shadow's failure is counted, never answered
            tally.errors += 1
            self.shadow_requests.labels(rollout.model, version, "failed").inc()
            log.warning("shadow %s version %s failed: %s", rollout.model, version, exc)
            self.persist(rollout)
            return
        self.shadow_requests.labels(rollout.model, version, "answered").inc()
        if tally.recent is None:
            values = cosines(old, new)
        else:
            tally.recent.extend(zip(old, new))
            if len(tally.recent) < 2:
                return
            olds, news = (np.stack(v) for v in zip(*tally.recent))
            values = rank_overlap(olds, news)[-len(old):]
        for value in values.tolist():
            self.agreement.labels(rollout.model, version, rollout.comparison).observe(value)
        tally.requests += len(values)
        tally.agreements += len(values)
        tally.agreement_sum += float(values.sum())
        least = float(values.min())
        tally.agreement_min = least if tally.agreement_min is None else min(tally.agreement_min, least)
        self.persist(rollout)

    async def drain(self) -> None:
        """Wait for the comparisons under way (the app's shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
