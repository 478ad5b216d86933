"""Release sources held to their digests, fetched or read from a folder, and built with their log kept: what
`make backend` shares between Triton's onnxruntime backend (native_backend.py) and the tokenizer's operator
library (operator_library.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

from ..errors import TritonizeError

FETCH_TIMEOUT_S = 30.0
STAMP = "build.json"  # in a built folder: what it was built from
# A path below an archive's top folder -> whether it belongs to the tree that is digested, extracted and built.
Keep = Callable[[str], bool]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _kept(archive: Path, keep: Keep | None):
    """Each member of the archive below its top folder that `keep` keeps, with that path."""
    with tarfile.open(archive) as tar:
        for member in tar:
            _, _, path = member.name.partition("/")
            if path.strip("/") and (keep is None or keep(path)):
                yield tar, member, path


def tree_digest(archive: Path, keep: Keep | None = None) -> str:
    """sha256 of a source archive's tree: each file's path below the top folder, whether it is executable and the
    sha256 of its bytes, and each link's target, sorted. The top folder's name, the archive's own metadata and
    its compression do not count, so `git archive` and GitHub's archive of one commit agree; with `keep`, only
    the paths it keeps count (a folder of sources trimmed of tests and docs, and the whole tree, agree)."""
    entries = []
    for tar, member, path in _kept(archive, keep):
        if member.isfile():
            data = tar.extractfile(member).read()
            entries.append(f"{path}\0{'x' if member.mode & 0o111 else '-'}\0{hashlib.sha256(data).hexdigest()}")
        elif member.issym():
            entries.append(f"{path}\0l\0{member.linkname}")
    return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()


def held(path: Path, expected: str, measure: Callable[[Path], str], what: str, hint: str) -> Path:
    got = measure(path)
    if got != expected:
        raise TritonizeError(f"{path} has {what} {got}, not the release's {expected}", hint=hint)
    return path


def local(sources: Path, name: str, hint: str) -> Path:
    path = sources / name
    if not path.is_file():
        raise TritonizeError(f"no {name} in {sources}", hint=hint)
    return path


def download(url: str, target: Path, say: Callable[[str], None], hint: str) -> Path:
    """url into target (whole or not at all)."""
    import urllib.error
    import urllib.request

    say(f"fetching {url}")
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        reason = getattr(exc, "reason", exc)
        raise TritonizeError(f"could not fetch {url}: {reason}", hint=hint) from None
    partial.replace(target)
    return target


def extract(archive: Path, name: str, into: Path, keep: Keep | None = None) -> Path:
    """The archive's tree (what `keep` keeps) into `into/<name>/`, whatever its top folder is called."""
    members = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            _, _, path = member.name.partition("/")
            if path.strip("/") and (keep is None or keep(path)):
                member.name = f"{name}/{path}"
                members.append(member)
        tar.extractall(into, members=members, filter="data")
    return into / name


def run_logged(cmd: list[str], log: Path, what: str) -> None:
    """Run a build command with its output appended to `log`; one error with the log's end where it fails."""
    with log.open("a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise TritonizeError(f"{Path(cmd[0]).name} failed building {what}; the log's end:\n" + "\n".join(tail),
                                 hint=f"the whole log: {log}")


def read_stamp(directory: Path) -> dict | None:
    try:
        return json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        return None


def write_stamp(directory: Path, stamp: dict) -> None:
    (directory / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
