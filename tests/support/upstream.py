"""Stand-ins for the hosts a fresh install fetches from, served on loopback from a folder: GitHub's archives of
the onnxruntime backend's release commits (and the operator library's), Debian's pool, a package index. Nothing here reaches another host."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import tarfile
import urllib.parse
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

from support.loopback import serving
from tritonize.runtime import native_backend, operator_library


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def served(folder: Path):
    """`folder` over HTTP on 127.0.0.1; yields the base URL."""
    with serving(functools.partial(_Quiet, directory=str(folder))) as address:
        yield f"http://{address}"


def repack(archive: Path, target: Path, top: str, change: str | None = None) -> Path:
    """The archive's tree again under another top folder (GitHub's `<repo>-<commit>/`), compressed anew; with
    `change`, that file's bytes get one more line (another tree)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as src, tarfile.open(target, "w:gz") as out:
        for member in src.getmembers():
            _, _, path = member.name.partition("/")
            data = src.extractfile(member).read() if member.isfile() else None
            member.name = f"{top}/{path}" if path else top
            if data is not None and path == change:
                data += b"\n# changed\n"
                member.size = len(data)
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    return target


def upstream_layout(sources: Path, root: Path, change: tuple[str, str] | None = None,
                    operator_sources: Path | None = None) -> Path:
    """`root` laid out as GitHub's archive URLs and Debian's pool for the backend's release, from a local sources
    folder (and the operator library's, from its folder, where one is given); `change` = (repo, path): that
    repository's archive carries one changed file."""
    for source in operator_library.SOURCES.values() if operator_sources else ():
        repack(operator_sources / source.archive,
               root / "github" / source.github / "archive" / f"{source.commit}.tar.gz",
               f"{source.github.split('/')[1]}-{source.commit}")
    for repo, (commit, _) in native_backend.SOURCES.items():
        repack(sources / f"triton-{repo}-{native_backend.RELEASE}.tar.gz",
               root / "github" / "triton-inference-server" / repo / "archive" / f"{commit}.tar.gz",
               f"{repo}-{commit}", change[1] if change and change[0] == repo else None)
    pool = root / "debian" / "pool" / "main" / "o" / "onnxruntime"
    pool.mkdir(parents=True, exist_ok=True)
    (pool / native_backend.HEADERS[0]).write_bytes((sources / native_backend.HEADERS[0]).read_bytes())
    return root


def simple_index(wheels: list[Path], root: Path) -> Path:
    """A PEP 503 index of these wheels under `root` (each project's page links its files with their sha256)."""
    for wheel in wheels:
        project = wheel.name.split("-")[0].lower().replace("_", "-")
        page = root / project
        page.mkdir(parents=True, exist_ok=True)
        (page / wheel.name).write_bytes(wheel.read_bytes())
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        href = urllib.parse.quote(wheel.name)
        with (page / "index.html").open("a") as html:
            html.write(f'<a href="{href}#sha256={digest}">{wheel.name}</a><br>\n')
    return root
