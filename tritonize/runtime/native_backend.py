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
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import TritonizeError
from ..paths import PACKAGE_DIR, find_program
from . import sources as release
from .sources import STAMP, read_stamp, sha256, tree_digest

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
HEADER = "onnxruntime_c_api.h"
GOOGLETEST_SOURCE = Path("/usr/src/googletest")
TARGET = "triton-onnxruntime-backend"
WHAT = "the onnxruntime backend"

BACKEND_LIBRARY = "libtriton_onnxruntime.so"
ONNXRUNTIME_SONAME = "libonnxruntime.so.1"  # what the backend links; a copy of the wheel's library under that name
SERVER_LIBRARY = "libtritonserver.so"  # what the backend links; the wheel renamed its copy (linked at serve time)
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


def build_dir(root: Path = DEFAULT_ROOT) -> Path:
    """Where the backend built against this onnxruntime lives."""
    import onnxruntime

    return Path(root) / f"onnxruntime-{onnxruntime.__version__}"


def _expected_stamp() -> dict:
    return {"release": RELEASE, "sources": {r: c for r, (c, _) in SOURCES.items()},
            "onnxruntime": sha256(onnxruntime_library())}


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
    if directory is None and not os.environ.get(ENV) and read_stamp(backend.directory) != _expected_stamp():
        raise TritonizeError(f"the backend in {backend.directory} was built for other sources or another "
                             f"onnxruntime library", hint="rebuild it with `make backend`")
    return backend


def fetch_sources(cache: Path, github: str = GITHUB, debian: str = DEBIAN, say=print) -> Path:
    """The release's archives and the headers' .deb, fetched from upstream into `cache` (what is there already and
    checks out is kept) under the names a local sources folder has; each checked as `build` checks a folder's."""
    cache.mkdir(parents=True, exist_ok=True)
    for repo, (commit, digest) in SOURCES.items():
        target = cache / f"triton-{repo}-{RELEASE}.tar.gz"
        if not (target.is_file() and tree_digest(target) == digest):
            release.download(f"{github.rstrip('/')}/triton-inference-server/{repo}/archive/{commit}.tar.gz", target,
                             say, SOURCE_HINT)
    name, digest = HEADERS
    target = cache / name
    if not (target.is_file() and sha256(target) == digest):
        release.download(f"{debian.rstrip('/')}/pool/main/o/onnxruntime/{name}", target, say, SOURCE_HINT)
    return cache


def cmake_program() -> str:
    """The lock's CMake (PyPI's `cmake`, beside this interpreter): the operator library needs 3.28 or later, which
    Debian 12 does not have, and one CMake builds both."""
    cmake = find_program("cmake")
    if cmake is None:
        raise TritonizeError("building needs CMake 3.28 or later, which the lock installs",
                             hint="make install (or: pip install 'cmake>=3.28')")
    return cmake


def headers_package(sources: Path) -> Path:
    """Debian's package of onnxruntime's headers in a sources folder, held to its sha256."""
    return release.held(release.local(sources, HEADERS[0], SOURCE_HINT), HEADERS[1], sha256, "sha256", SOURCE_HINT)


def unpack_headers(deb: Path, into: Path) -> Path:
    """The folder of onnxruntime's headers (onnxruntime_c_api.h and the C++ ones) from Debian's package."""
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    header = next(into.rglob(HEADER), None)
    if header is None:
        raise TritonizeError(f"{deb.name} holds no {HEADER}", hint=SOURCE_HINT)
    return header.parent


def _missing_tools() -> list[str]:
    missing = [tool for tool in ("g++",) if not shutil.which(tool)]
    if not Path("/usr/include/rapidjson/document.h").is_file():
        missing.append("rapidjson-dev")
    if not (GOOGLETEST_SOURCE / "CMakeLists.txt").is_file():
        missing.append("googletest")
    return missing


def build(sources: Path | None, root: Path = DEFAULT_ROOT, jobs: int | None = None, force: bool = False,
          say=print, github: str = GITHUB, debian: str = DEBIAN) -> NativeBackend:
    """Build (or find already built) the backend for the installed onnxruntime from the release sources: the
    folder `sources`, or (None) fetched from upstream."""
    target = build_dir(root)
    stamp = _expected_stamp()
    if not force and read_stamp(target) == stamp and (target / BACKEND_LIBRARY).is_file():
        say(f"onnxruntime backend up to date in {target}")
        return NativeBackend(target)
    missing = _missing_tools()
    if missing:
        raise TritonizeError(f"building the onnxruntime backend needs Debian's {' '.join(missing)}",
                             hint=f"sudo apt-get install {' '.join(missing)}  (make system-deps does it as root)")
    root = Path(root)
    sources = Path(sources) if sources else fetch_sources(root / SOURCES_CACHE, github, debian, say)
    archives = {repo: release.held(release.local(sources, f"triton-{repo}-{RELEASE}.tar.gz", SOURCE_HINT), digest,
                                   tree_digest, "tree digest", SOURCE_HINT)
                for repo, (_, digest) in SOURCES.items()}
    headers_deb = headers_package(sources)
    start = time.monotonic()
    say(f"building Triton's onnxruntime backend ({RELEASE}) against {onnxruntime_library().name} ...")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ort-backend-", dir=root) as tmp:
        work = Path(tmp)
        for repo, archive in archives.items():
            release.extract(archive, repo, work / "src")
        header = unpack_headers(headers_deb, work / "headers") / HEADER
        lib = work / "lib"
        lib.mkdir()
        shutil.copy2(onnxruntime_library(), lib / ONNXRUNTIME_SONAME)
        (lib / "libonnxruntime.so").symlink_to(ONNXRUNTIME_SONAME)  # what the linker looks for
        src, out, log = work / "src", work / "build", root / "build.log"
        log.write_text("")
        release.run_logged([cmake_program(), "-S", str(src / "onnxruntime_backend"), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
              "-DTRITON_ENABLE_GPU=OFF", "-DTRITON_ENABLE_ONNXRUNTIME_TENSORRT=OFF",
              "-DTRITON_ENABLE_ONNXRUNTIME_OPENVINO=OFF",
              f"-DTRITON_ONNXRUNTIME_INCLUDE_PATHS={header.parent}", f"-DTRITON_ONNXRUNTIME_LIB_PATHS={lib}",
              # offline: the sources' FetchContent reads the folders above; common's tests want googletest
              "-DFETCHCONTENT_FULLY_DISCONNECTED=ON", f"-DFETCHCONTENT_SOURCE_DIR_REPO-COMMON={src / 'common'}",
              f"-DFETCHCONTENT_SOURCE_DIR_REPO-CORE={src / 'core'}",
              f"-DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND={src / 'backend'}",
              f"-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST={GOOGLETEST_SOURCE}"], log, WHAT)
        release.run_logged([cmake_program(), "--build", str(out), "--target", TARGET, "-j",
                            str(jobs or os.cpu_count() or 1)], log, WHAT)
        staged = work / "staged"
        staged.mkdir()
        shutil.copy2(out / BACKEND_LIBRARY, staged / BACKEND_LIBRARY)
        shutil.copy2(lib / ONNXRUNTIME_SONAME, staged / ONNXRUNTIME_SONAME)
        release.write_stamp(staged, stamp)
        shutil.rmtree(target, ignore_errors=True)
        staged.rename(target)
    say(f"built {target / BACKEND_LIBRARY} in {time.monotonic() - start:.1f}s")
    return NativeBackend(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonize.runtime.native_backend", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the backend for the installed onnxruntime (a no-op when up to date)")
    b.add_argument("--sources", type=Path, default=None,
                   help="the folder of the backend's release archives and the headers' .deb (see SOURCES); default: "
                        "fetch them from upstream")
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
