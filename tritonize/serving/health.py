"""The one health check: a tiny inference through the ensemble, as text-embeddings-inference's /health runs one.

Triton's ready endpoints say a model is loaded, and Triton 2.51 keeps saying
so after a Python stub has died; only an answer proves the pipeline works.
Standard library only: the same file runs in the serving image (compose
healthcheck, Kubernetes probes: `python3 health.py --file /models/health.json`),
in `deploy.py local status` and in the local supervisor.

health.json, written into the repository at generation:
{"model": <ensemble>, "request": <a KServe v2 JSON body with one row>, "outputs": [<names the answer must hold>]}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

HEALTH_FILE = "health.json"
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


def probe_file(http_url: str, health_file: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Probe:
    """The check a repository's health.json describes."""
    try:
        with open(health_file, encoding="utf-8") as f:
            spec = json.load(f)
        return probe(http_url, spec["model"], spec["request"], list(spec["outputs"]), timeout_s)
    except (OSError, ValueError, KeyError) as exc:
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
