"""Triton's native onnxruntime backend for the wheel's tritonserver, built from its release sources.

NVIDIA's container ships this backend and serves each model step's config.pbtxt on it (`platform:
"onnxruntime_onnx"`). The nvidia-pytriton wheel's server (Triton 2.51, release 24.10) has only the Python
backend, so the production configs could not run outside that image. `make backend` (`python -m
tritonize.runtime.native_backend build`) builds the backend from the upstream release sources of the wheel's
server (a folder of release archives, or fetched from upstream: each repository's archive of the pinned commit
from GitHub, the headers' package from Debian), checked against the digests below, and links it against the locked onnxruntime wheel's own
`libonnxruntime.so`: the same runtime the fused step and verification use. The result sits in
`build/onnxruntime-backend/onnxruntime-<version>/`, kept until onnxruntime's library or the sources change.

Only the backend's CPU build: no CUDA, TensorRT or OpenVINO provider (this build exists so that the production
configs are served and tested; a GPU deployment runs NVIDIA's image).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import TritonizeError
from ..paths import PACKAGE_DIR

RELEASE = "r24.10"  # the release of the wheel's server, Triton 2.51
# Each repository of triton-inference-server at the commit RELEASE names, as a tar.gz of that commit's tree: a
# local `triton-<repo>-r24.10.tar.gz` (`git archive --prefix=<repo>/ <commit>`) or GitHub's archive of the commit
# (top folder `<repo>-<commit>/`). Both are held to the digest of the tree (`tree_digest`), which names no top
# folder and no compression, so the same commit passes from either.
SOURCES: dict[str, tuple[str, str]] = {  # repo -> (commit, tree_digest of its archive)
    "onnxruntime_backend": ("17e5cb23a6fbeb37282eb7079dd0b580cd79530d",
                            "21ee557673236ff816e06ece8e706a42ce8d25b4e1d24d29d4d8db1a5ee18d87"),
    "backend": ("ac03a5d97403dec841ad46d0439e93db12c9268f",
                "2b8252c873be70eb112f0613315cb3fe129acd0bb83b4af3daf0d967ff025f43"),
    "core": ("bfec7c61dc0939433f64f14e89b1973073eac8ba",
             "ebafe651c2c27f4005cbdd59574cdd6cb2ed711828ba7237b84f5092cfe4031e"),
    "common": ("578491fc3944f77d16a6a38e3d7691c485c47ba0",
               "8aed36a536e8b1f40db5364453e15e1b21aed0c56703c5e5631460815fc4b7b3"),
}
# onnxruntime's C API header, the only one the backend includes; it may be older than the library, never newer.
# Debian's libonnxruntime-dev package (its headers alone are used; nothing is installed), checked by its sha256.
HEADERS = ("libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb",
           "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08")
# Where the sources are fetched from without a folder: `{github}/triton-inference-server/<repo>/archive/<commit>.tar.gz`
# and `{debian}/pool/main/o/onnxruntime/<deb>` (stand-ins for both are served in the tests).
GITHUB = "https://github.com"
DEBIAN = "https://deb.debian.org/debian"
FETCH_TIMEOUT_S = 30.0
HEADER = "onnxruntime_c_api.h"
GOOGLETEST_SOURCE = Path("/usr/src/googletest")
TARGET = "triton-onnxruntime-backend"

BACKEND_LIBRARY = "libtriton_onnxruntime.so"
ONNXRUNTIME_SONAME = "libonnxruntime.so.1"  # what the backend links; a copy of the wheel's library under that name
SERVER_LIBRARY = "libtritonserver.so"  # what the backend links; the wheel renamed its copy (linked at serve time)
STAMP = "build.json"
ENV = "TRITONIZE_ONNXRUNTIME_BACKEND"  # a built backend folder elsewhere
DEFAULT_ROOT = PACKAGE_DIR.parent / "build" / "onnxruntime-backend"
SOURCE_HINT = ("on a machine that reaches GitHub and Debian the sources are fetched; elsewhere give the folder holding "
               "the four triton-<repo>-r24.10.tar.gz archives (`git archive --prefix=<repo>/ <commit>` of each "
               "triton-inference-server repository at the commits in tritonize/runtime/native_backend.py) and the "
               "headers' .deb with --sources (make backend BACKEND_SOURCES=DIR)")
SOURCES_CACHE = "sources"  # under the backends' root: what was fetched, kept for the next build


def onnxruntime_library() -> Path:
    """The locked onnxruntime wheel's own shared library (libonnxruntime.so.1.<minor>.<patch>)."""
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    found = sorted(capi.glob("libonnxruntime.so.1.*"))
    if not found:
        raise TritonizeError(f"no libonnxruntime.so.1.* in {capi}", hint="install onnxruntime from the lock")
    return found[-1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_dir(root: Path = DEFAULT_ROOT) -> Path:
    """Where the backend built against this onnxruntime lives."""
    import onnxruntime

    return Path(root) / f"onnxruntime-{onnxruntime.__version__}"


def _expected_stamp() -> dict:
    return {"release": RELEASE, "sources": {r: c for r, (c, _) in SOURCES.items()},
            "onnxruntime": _sha256(onnxruntime_library())}


@dataclass(frozen=True)
class NativeBackend:
    """A built backend folder: libtriton_onnxruntime.so and the onnxruntime library it runs."""

    directory: Path

    @property
    def library(self) -> Path:
        return self.directory / BACKEND_LIBRARY

    def lay_out(self, target: Path, server_library: Path) -> Path:
        """`target` (backends/onnxruntime) as the server loads it: the backend, its onnxruntime, and
        libtritonserver.so naming the wheel's renamed server library (the loader maps one copy)."""
        target.mkdir(parents=True, exist_ok=True)
        for name in (BACKEND_LIBRARY, ONNXRUNTIME_SONAME):
            shutil.copy2(self.directory / name, target / name)
        link = target / SERVER_LIBRARY
        link.unlink(missing_ok=True)
        link.symlink_to(server_library)
        return target


def find(directory: Path | None = None) -> NativeBackend:
    """The backend built for the installed onnxruntime, or one line that says how to build it."""
    chosen = directory or (Path(os.environ[ENV]) if os.environ.get(ENV) else build_dir())
    backend = NativeBackend(Path(chosen))
    if not backend.library.is_file() or not (backend.directory / ONNXRUNTIME_SONAME).is_file():
        raise TritonizeError(
            f"no native onnxruntime backend in {backend.directory}: the production configs need it on this server",
            hint="build it with `make backend` (about 20 s), or serve the fused step with --variant fused",
        )
    if directory is None and not os.environ.get(ENV) and _read_stamp(backend.directory) != _expected_stamp():
        raise TritonizeError(f"the backend in {backend.directory} was built for other sources or another "
                             f"onnxruntime library", hint="rebuild it with `make backend`")
    return backend


def _read_stamp(directory: Path) -> dict | None:
    try:
        return json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        return None


def tree_digest(archive: Path) -> str:
    """sha256 of a source archive's tree: each file's path below the top folder, whether it is executable and the
    sha256 of its bytes, and each link's target, sorted. The top folder's name, the archive's own metadata and
    its compression do not count, so `git archive` and GitHub's archive of one commit agree."""
    entries = []
    with tarfile.open(archive) as tar:
        for member in tar:
            _, _, path = member.name.partition("/")
            if not path.strip("/"):
                continue
            if member.isfile():
                data = tar.extractfile(member).read()
                entries.append(f"{path}\0{'x' if member.mode & 0o111 else '-'}\0{hashlib.sha256(data).hexdigest()}")
            elif member.issym():
                entries.append(f"{path}\0l\0{member.linkname}")
    return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()


def _held(path: Path, expected: str, measure, what: str) -> Path:
    got = measure(path)
    if got != expected:
        raise TritonizeError(f"{path} has {what} {got}, not the release's {expected}", hint=SOURCE_HINT)
    return path


def _local(sources: Path, name: str) -> Path:
    path = sources / name
    if not path.is_file():
        raise TritonizeError(f"no {name} in {sources}", hint=SOURCE_HINT)
    return path


def _download(url: str, target: Path, say) -> Path:
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
        raise TritonizeError(f"could not fetch {url}: {reason}", hint=SOURCE_HINT) from None
    partial.replace(target)
    return target


def fetch_sources(cache: Path, github: str = GITHUB, debian: str = DEBIAN, say=print) -> Path:
    """The release's archives and the headers' .deb, fetched from upstream into `cache` (what is there already and
    checks out is kept) under the names a local sources folder has; each checked as `build` checks a folder's."""
    cache.mkdir(parents=True, exist_ok=True)
    for repo, (commit, digest) in SOURCES.items():
        target = cache / f"triton-{repo}-{RELEASE}.tar.gz"
        if not (target.is_file() and tree_digest(target) == digest):
            _download(f"{github.rstrip('/')}/triton-inference-server/{repo}/archive/{commit}.tar.gz", target, say)
    name, sha256 = HEADERS
    target = cache / name
    if not (target.is_file() and _sha256(target) == sha256):
        _download(f"{debian.rstrip('/')}/pool/main/o/onnxruntime/{name}", target, say)
    return cache


def _extract(archive: Path, repo: str, into: Path) -> None:
    """The archive's tree into `into/<repo>/`, whatever its top folder is called."""
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            _, _, path = member.name.partition("/")
            if path.strip("/"):
                member.name = f"{repo}/{path}"
                members.append(member)
        tar.extractall(into, members=members, filter="data")


def _missing_tools() -> list[str]:
    missing = [tool for tool, found in (("cmake", shutil.which("cmake")), ("g++", shutil.which("g++"))) if not found]
    if not Path("/usr/include/rapidjson/document.h").is_file():
        missing.append("rapidjson-dev")
    if not (GOOGLETEST_SOURCE / "CMakeLists.txt").is_file():
        missing.append("googletest")
    return missing


def _run(cmd: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise TritonizeError(f"{cmd[0]} failed building the onnxruntime backend; the log's end:\n"
                                 + "\n".join(tail), hint=f"the whole log: {log}")


def build(sources: Path | None, root: Path = DEFAULT_ROOT, jobs: int | None = None, force: bool = False,
          say=print, github: str = GITHUB, debian: str = DEBIAN) -> NativeBackend:
    """Build (or find already built) the backend for the installed onnxruntime from the release sources: the
    folder `sources`, or (None) fetched from upstream."""
    target = build_dir(root)
    stamp = _expected_stamp()
    if not force and _read_stamp(target) == stamp and (target / BACKEND_LIBRARY).is_file():
        say(f"onnxruntime backend up to date in {target}")
        return NativeBackend(target)
    missing = _missing_tools()
    if missing:
        raise TritonizeError(f"building the onnxruntime backend needs Debian's {' '.join(missing)}",
                             hint=f"sudo apt-get install {' '.join(missing)}  (make system-deps does it as root)")
    root = Path(root)
    sources = Path(sources) if sources else fetch_sources(root / SOURCES_CACHE, github, debian, say)
    archives = {repo: _held(_local(sources, f"triton-{repo}-{RELEASE}.tar.gz"), digest, tree_digest, "tree digest")
                for repo, (_, digest) in SOURCES.items()}
    headers_deb = _held(_local(sources, HEADERS[0]), HEADERS[1], _sha256, "sha256")
    start = time.monotonic()
    say(f"building Triton's onnxruntime backend ({RELEASE}) against {onnxruntime_library().name} ...")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ort-backend-", dir=root) as tmp:
        work = Path(tmp)
        for repo, archive in archives.items():
            _extract(archive, repo, work / "src")
        subprocess.run(["dpkg-deb", "-x", str(headers_deb), str(work / "headers")], check=True)
        header = next((work / "headers").rglob(HEADER), None)
        if header is None:
            raise TritonizeError(f"{headers_deb.name} holds no {HEADER}", hint=SOURCE_HINT)
        lib = work / "lib"
        lib.mkdir()
        shutil.copy2(onnxruntime_library(), lib / ONNXRUNTIME_SONAME)
        (lib / "libonnxruntime.so").symlink_to(ONNXRUNTIME_SONAME)  # what the linker looks for
        src, out, log = work / "src", work / "build", root / "build.log"
        log.write_text("")
        _run(["cmake", "-S", str(src / "onnxruntime_backend"), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
              "-DTRITON_ENABLE_GPU=OFF", "-DTRITON_ENABLE_ONNXRUNTIME_TENSORRT=OFF",
              "-DTRITON_ENABLE_ONNXRUNTIME_OPENVINO=OFF",
              f"-DTRITON_ONNXRUNTIME_INCLUDE_PATHS={header.parent}", f"-DTRITON_ONNXRUNTIME_LIB_PATHS={lib}",
              # offline: the sources' FetchContent reads the folders above; common's tests want googletest
              "-DFETCHCONTENT_FULLY_DISCONNECTED=ON", f"-DFETCHCONTENT_SOURCE_DIR_REPO-COMMON={src / 'common'}",
              f"-DFETCHCONTENT_SOURCE_DIR_REPO-CORE={src / 'core'}",
              f"-DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND={src / 'backend'}",
              f"-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST={GOOGLETEST_SOURCE}"], log)
        _run(["cmake", "--build", str(out), "--target", TARGET, "-j", str(jobs or os.cpu_count() or 1)], log)
        staged = work / "staged"
        staged.mkdir()
        shutil.copy2(out / BACKEND_LIBRARY, staged / BACKEND_LIBRARY)
        shutil.copy2(lib / ONNXRUNTIME_SONAME, staged / ONNXRUNTIME_SONAME)
        (staged / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staged.rename(target)
    say(f"built {target / BACKEND_LIBRARY} in {time.monotonic() - start:.1f}s")
    return NativeBackend(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonize.runtime.native_backend", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the backend for the installed onnxruntime (a no-op when up to date)")
    b.add_argument("--sources", type=Path, default=None,
                   help="the folder of release archives (see SOURCES); default: fetch them from upstream")
    b.add_argument("--github", default=GITHUB, help="where the release archives are fetched from (default: %(default)s)")
    b.add_argument("--debian", default=DEBIAN, help="the Debian mirror of the headers' package (default: %(default)s)")
    b.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where built backends are kept (default: %(default)s)")
    b.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: every core)")
    b.add_argument("--force", action="store_true", help="build again even when up to date")
    sub.add_parser("where", help="print the folder of the backend built for the installed onnxruntime")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.sources, args.root, args.jobs, args.force, github=args.github, debian=args.debian)
        else:
            print(find().directory)
    except TritonizeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
