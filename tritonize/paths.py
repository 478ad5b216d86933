"""Where the project's own files live (templates, bundled data).

`templates/` stays at the top of a checkout, where users look for it; a
built wheel carries it as package data inside `tritonize/templates`.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_INSTALLED_TEMPLATES = PACKAGE_DIR / "templates"
TEMPLATES_DIR = _INSTALLED_TEMPLATES if _INSTALLED_TEMPLATES.is_dir() else PACKAGE_DIR.parent / "templates"
DATA_DIR = PACKAGE_DIR / "data"


def child_pythonpath() -> str:
    """PYTHONPATH for a child process (the supervisor, the API, a baseline) that must import this package from
    where this process did, ahead of whatever the environment already names."""
    return os.pathsep.join(p for p in (str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH")) if p)


def find_program(name: str) -> str | None:
    """A program the lock installs (its wheel's scripts land beside this interpreter, on PATH or not), else
    one on PATH: `.venv/bin/python generate.py` runs without the virtualenv activated."""
    import shutil
    import sysconfig

    return shutil.which(name, path=os.pathsep.join(p for p in (sysconfig.get_path("scripts"),
                                                               os.environ.get("PATH")) if p))
