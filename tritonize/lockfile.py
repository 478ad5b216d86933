"""Hash-pinned requirement files (`make lock` writes them with uv): read them, compare them with what is installed.

requirements.lock pins the development and test environment; tritonize/data/serving-image.lock pins what the
serving Dockerfile adds to NVIDIA's image, and tritonize/data/api-image.lock what the API image installs. `python -m tritonize.lockfile --newer requirements.lock` lists what
an environment has that differs from a lock (`make test-latest` prints it).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

SERVING_IMAGE_LOCK = Path(__file__).resolve().parent / "data" / "serving-image.lock"
API_IMAGE_LOCK = Path(__file__).resolve().parent / "data" / "api-image.lock"  # docker/api.Dockerfile


@dataclass(frozen=True)
class Pin:
    """One locked distribution: `name==version` and the sha256 of every file it may be installed from."""

    name: str  # canonical (PEP 503)
    version: str
    hashes: tuple[str, ...]

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


def read_lock(path: Path) -> dict[str, Pin]:
    """The pins of a pip requirements file in `pip-compile --generate-hashes` form, by canonical name."""
    pins: dict[str, Pin] = {}
    for entry in Path(path).read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        words = entry.split("#", 1)[0].split()
        if not words or words[0].startswith("-"):
            continue
        name, sep, version = words[0].partition("==")
        if not sep:
            raise ValueError(f"{path}: {words[0]!r} is not pinned with ==")
        hashes = tuple(w.split(":", 1)[1] for w in words[1:] if w.startswith("--hash=sha256:"))
        pins[canonicalize_name(name)] = Pin(canonicalize_name(name), version, hashes)
    return pins


def installed() -> dict[str, str]:
    """Canonical name -> version of every distribution in this environment."""
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}


def differences(pins: dict[str, Pin], have: dict[str, str]) -> list[str]:
    """One line per locked distribution that this environment has at another version, or lacks."""
    lines = []
    for name, pin in sorted(pins.items()):
        got = have.get(name)
        if got is None:
            lines.append(f"{name}: locked {pin.version}, not installed")
        elif Version(got) != Version(pin.version):
            way = "newer" if Version(got) > Version(pin.version) else "older"
            lines.append(f"{name}: locked {pin.version}, installed {got} ({way})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--newer", type=Path, required=True, metavar="LOCK",
                        help="list what this environment has at another version than LOCK")
    args = parser.parse_args(argv)
    lines = differences(read_lock(args.newer), installed())
    print("\n".join(f"  {line}" for line in lines) if lines else f"  nothing: this environment is {args.newer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
