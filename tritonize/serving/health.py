"""The one health check: a tiny inference through the ensemble, as text-embeddings-inference's /health runs one.

Triton's ready endpoints say a model is loaded, and Triton 2.51 keeps saying
so after a Python stub has died; only an answer proves the pipeline works.
Standard library only: the same file runs in the serving image (compose
healthcheck, Kubernetes probes: `python3 health.py --file /models/health.json`),
in `deploy.py local status` and in the local supervisor.

health.json, written into the repository at generation, holds one check per model:
{"model": <ensemble>, "request": <a KServe v2 JSON body with one row>, "outputs": [<names the answer must hold>]}
A repository of one model holds that check alone (what images built before repositories of several models
read); a repository of several holds {"checks": [<one check per model>]}, and is healthy when every
model answers. The checks run at once, so the whole check takes as long as the slowest model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

HEALTH_FILE = "health.json"
CHECKS_KEY = "checks"  # health.json of a repository of several models: {"checks": [...]}
DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 5.0
BUSY = 503  # Triton refused the check because its queues are full: the server answered, it sheds load


@dataclass(frozen=True)
class Probe:
    """One health check's outcome: whether the ensemble answered with every output, how fast, and why not."""

    ok: bool
    latency_ms: float
    detail: str
    code: int = 0  # the HTTP status, 0 when nothing answered (503: the server's queues are full)


def probe(http_url: str, model: str, request: dict, outputs: list[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> Probe:
    """POST the request to the ensemble; healthy when it answers 200 with every expected output."""
    base = http_url if http_url.startswith(("http://", "https://")) else f"http://{http_url}"
    req = urllib.request.Request(
        f"{base.rstrip('/')}/v2/models/{model}/infer", data=json.dumps(request).encode("utf-8"),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the server's own address
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", errors="replace")
        return Probe(False, _ms(start), f"HTTP {exc.code}: {detail}", exc.code)
    except (OSError, ValueError) as exc:  # refused, timed out, not JSON
        return Probe(False, _ms(start), f"{type(exc).__name__}: {exc}")
    got = {o.get("name") for o in body.get("outputs", [])}
    missing = [name for name in outputs if name not in got]
    if missing:
        return Probe(False, _ms(start), f"the answer lacks {', '.join(missing)}", 200)
    return Probe(True, _ms(start), f"{model} answered in {_ms(start):.0f} ms", 200)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def checks_of(document: dict) -> list[dict]:
    """The checks a health.json holds: a repository of one model's check, or each of several."""
    return list(document[CHECKS_KEY]) if CHECKS_KEY in document else [document]


def document(checks: list[dict]) -> dict:
    """health.json for these checks: one check alone stays in the format every image reads."""
    return dict(checks[0]) if len(checks) == 1 else {CHECKS_KEY: list(checks)}


def probe_checks(http_url: str, checks: list[dict], timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Probe]:
    """Every check at once: a server of several models is checked in the time of its slowest answer."""
    def one(check: dict) -> Probe:
        return probe(http_url, check["model"], check["request"], list(check["outputs"]), timeout_s)

    if len(checks) == 1:
        return [one(checks[0])]
    with ThreadPoolExecutor(max_workers=len(checks)) as pool:
        return list(pool.map(one, checks))


def combined(models: list[str], probes: list[Probe]) -> Probe:
    """One outcome for several models: healthy when every model answered; busy (503) only when every failure
    is busy; the failures first in the detail, each named after its model."""
    if len(probes) == 1:
        return probes[0]
    failed = [(m, p) for m, p in zip(models, probes) if not p.ok]
    code = 200 if not failed else next((p.code for _, p in failed if p.code != BUSY), BUSY)
    details = [f"{m}: {p.detail}" for m, p in failed] + [p.detail for p in probes if p.ok]
    return Probe(not failed, max(p.latency_ms for p in probes), "; ".join(details), code)


def probe_file(http_url: str, health_file: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Probe:
    """The check a repository's health.json describes: every model's."""
    try:
        with open(health_file, encoding="utf-8") as f:
            checks = checks_of(json.load(f))
        if not checks:
            raise ValueError("no checks")
        models = [str(check["model"]) for check in checks]
        return combined(models, probe_checks(http_url, checks, timeout_s))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Probe(False, 0.0, f"cannot read {health_file}: {exc}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="Triton's HTTP endpoint (default: %(default)s)")
    parser.add_argument("--file", default=HEALTH_FILE, help="the repository's health.json (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds (default: %(default)s)")
    parser.add_argument(
        "--busy-ok", action="store_true",
        help=f"count HTTP {BUSY} (full queues) as healthy: an overloaded server is alive, and failing the "
        "check would move its load onto the other replicas (Kubernetes probes)",
    )
    args = parser.parse_args(argv)
    result = probe_file(args.url, args.file, args.timeout)
    if not result.ok and args.busy_ok and result.code == BUSY:
        print(f"healthy (busy): {result.detail}")
        return 0
    print(("healthy: " if result.ok else "unhealthy: ") + result.detail)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
