"""The container tests' programs (docker, mmdebstrap) come from `make system-deps-container`, which
`make test-container` runs first: Debian's docker CLI, not another one found first on the PATH."""

from __future__ import annotations

import sys
from pathlib import Path

from support import programs


def test_the_container_tests_programs_come_from_system_deps_container() -> None:
    calls = [c for c in programs.scan(programs.project_files()) if c.container_only]
    assert {"docker", "mmdebstrap"} <= {c.program for c in calls}
    packages = programs.makefile_packages()
    allowed = set(packages["system-deps"]) | set(packages["system-deps-container"])
    assert programs.unprovided(calls, allowed, Path(sys.prefix)) == {}
