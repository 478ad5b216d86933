"""The one CLI. Each command lives in its own module that exposes `register(subparsers)`.

`generate.py` and `deploy.py` at the repository root call into `main`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import TritonizeError

# command name -> module exposing register(subparsers); imported lazily by each module's run.
COMMANDS = {
    "generate": "tritonize.generate",
    "deploy": "tritonize.runtime.cli",
    "bench": "tritonize.bench.cli",
    "tune": "tritonize.bench.tune",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tritonize",
        description="Hugging Face transformer -> Triton model repository that serves raw strings.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # command not available in this build
            raise
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
