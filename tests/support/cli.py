"""`generate.py ARGS` run by this interpreter: the script calls `tritonize.cli.main`, so calling it here runs what
the script runs, with its exit code, stdout and stderr, without a new interpreter's ~5 s of imports per run
(tests/unit/test_wheel.py runs the installed script itself)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

from tritonize.cli import main

from . import REPO_ROOT


def run_generate(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    saved_dir, saved_debug = os.getcwd(), os.environ.pop("TRITONIZE_DEBUG", None)
    try:
        os.chdir(cwd)  # relative paths read as the script's, run from the checkout
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(["generate", *args])
            except SystemExit as exc:  # argparse's refusals
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(saved_dir)
        if saved_debug is not None:
            os.environ["TRITONIZE_DEBUG"] = saved_debug
    return subprocess.CompletedProcess(["generate.py", *args], code, out.getvalue(), err.getvalue())
