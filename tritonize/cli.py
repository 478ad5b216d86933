"""The one CLI. Each command lives in its own module that exposes `register(subparsers)`.

`generate.py` and `deploy.py` at the repository root call into `main`.
Heavy libraries (torch, transformers, the docker SDK) are imported inside
the commands that need them, so building the parser stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import generate
from .api import server as api_server
from .bench import cli as bench_cli
from .bench import rerank as bench_rerank
from .bench import runtimes, stress_cli, tune
from .errors import TritonizeError
from .runtime import cli as runtime_cli
from .k8s import cli as k8s_cli

COMMANDS = (generate, runtime_cli, k8s_cli, bench_cli, bench_rerank, tune, stress_cli, runtimes, api_server)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tritonize",
        description="Hugging Face transformer -> Triton model repository that serves raw strings.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TritonizeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - last resort: one line, traceback on demand
        if os.environ.get("TRITONIZE_DEBUG"):
            raise
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("hint: set TRITONIZE_DEBUG=1 for the full traceback", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
