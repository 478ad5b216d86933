"""Every program outside Python that the package and the tests run comes from the lock or from a Debian package
that `make system-deps` installs. A tool installed by hand (patchelf was, once) resolves to neither and fails
here, as it would fail on a fresh machine. The container tests' programs are held to `make
system-deps-container` in tests/container/test_programs.py, after that target ran."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from support import programs

VENV = Path(sys.prefix)


def test_every_program_the_code_runs_comes_from_the_lock_or_system_deps() -> None:
    calls = [c for c in programs.scan(programs.project_files()) if not c.container_only]
    found = {c.program for c in calls}
    # The scan sees through each way the code runs a program (a check on the scan, not a list to keep).
    assert {"cmake", "g++", "readelf", "promtool", "prometheus", "chromium", "dpkg-deb"} <= found, found
    allowed = set(programs.makefile_packages()["system-deps"])
    assert programs.unprovided(calls, allowed, VENV) == {}


def test_cmake_comes_from_the_lock() -> None:
    """The operator library needs CMake 3.28 or later, which Debian 12 does not have: the lock's builds both."""
    source, found = programs.origin(programs.Call("cmake", "-"), set(), VENV)
    assert source == "the lock", found


def test_a_program_that_system_deps_does_not_install_fails_the_check(tmp_path: Path) -> None:
    """The check itself: code that runs a program from no package the Makefile names, or one found nowhere."""
    code = tmp_path / "tool.py"
    code.write_text(textwrap.dedent("""
        import os, shutil, subprocess

        TOOL = os.environ.get("TRITONIZE_TOOL", "no-such-tool-anywhere")

        def pdf(path):
            subprocess.run(["pdftoppm", path], check=True)

        def fetch(url):
            cmd = ["curl", "-s", url]
            return subprocess.run(cmd)

        def _run(cmd):
            return subprocess.check_output(cmd)

        def version():
            return _run([TOOL, "--version"]), shutil.which("ls")
    """))
    calls = programs.scan([code])
    assert {c.program for c in calls} == {"pdftoppm", "curl", "no-such-tool-anywhere", "ls"}
    problems = programs.unprovided(calls, {"curl"}, VENV)
    assert "no-such-tool-anywhere" in problems and "not installed" in problems["no-such-tool-anywhere"]
    assert "curl" not in problems and "ls" not in problems  # listed; Debian's essential coreutils
    # pdftoppm: from poppler-utils where it is installed (not listed), else nowhere: a failure either way.
    assert "pdftoppm" in problems
    # Listing the package is what makes it pass: the same code with curl not listed fails.
    assert "curl" in programs.unprovided(calls, set(), VENV)
