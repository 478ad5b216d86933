"""The tokenizer graph's operators (onnxruntime-extensions) as a plain shared library, built from release sources.

The `onnxruntime-extensions` wheel ships its operators inside a Python extension module: it leaves CPython's
symbols to the interpreter that imports it, so a tritonserver (no interpreter) can load it only with a libpython
added to it and present where it serves. Built from the sources of the same release, `libortextensions.so` needs
only libc and libstdc++, and gives the wheel's tokens. `make backend` builds it beside Triton's onnxruntime
backend (`build`, from a folder of the release archives or fetched from upstream at the same commits, each held
to its tree digest); generation checks the tokenizer graph with it and ships it in the repository, and every
server tritonize starts finds it by its bare name (spec.GRAPH_LIBRARY_FILE): the local server beside its
onnxruntime backend (whose libonnxruntime's RUNPATH is $ORIGIN), the serving image through the library path its
entrypoint sets from the repository it serves (serving/watchdog.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import TritonizeError
from ..spec import GRAPH_LIBRARY_FILE
from . import sources as release
from .native_backend import (DEBIAN, DEFAULT_ROOT, HEADERS, SOURCES_CACHE, cmake_program, headers_package,
                             unpack_headers)
from .sources import read_stamp, tree_digest

VERSION = "0.15.2"
GITHUB = "https://github.com"
WHAT = "the tokenizer's operator library"
# Folders of onnxruntime-extensions' tree the library does not need (tests, docs, other languages' bindings, a
# Windows build tool), and the parts of nlohmann/json it builds from: a folder of sources may hold the trimmed
# trees, GitHub's archives hold the whole ones, and both are held to the digest of what is kept.
_UNUSED = ("test/", "docs/", "tutorials/", "java/", "nodejs/", "objectivec/", "csharp/",
           "cmake/externals/git.Win32.2.41.03.patch/")
_JSON_USED = ("include/", "single_include/", "cmake/", "CMakeLists.txt", "LICENSE.MIT", "meson.build",
              "nlohmann_json.natvis")


@dataclass(frozen=True)
class Source:
    """One repository at one commit: its archive's name in a sources folder, and the digest of its kept tree."""

    github: str  # owner/name
    commit: str
    archive: str
    digest: str
    fetch_content: str  # CMake's FetchContent name, whose source folder the build is given

    def keep(self, path: str) -> bool:
        if self.github == "microsoft/onnxruntime-extensions":
            return not path.startswith(_UNUSED)
        if self.github == "nlohmann/json":
            return path.startswith(_JSON_USED)
        return True


SOURCES: dict[str, Source] = {s.github.split("/")[1]: s for s in (
    # the last commit on main whose version.txt says 0.15.2 (2026-02-04)
    Source("microsoft/onnxruntime-extensions", "606591ff69040ef2502fa11b4b1866bc3b2a4e5b",
           "onnxruntime-extensions-606591ff.tar.gz",
           "f9ac35e74ee1c93eefc6eb5ea13c29f2647d1243541b5cd99521566113caa38a", ""),
    Source("microsoft/GSL", "1fcf53a2f64c72c76f5d84adb50d41e6c4467d23", "GSL-4.0.0.tar.gz",  # v4.0.0
           "f8e862b94a02924f4618f124c363f9a0d3f9d49b238f12d70a875b42c0939c0e", "GSL"),
    Source("nlohmann/json", "9cca280a4d0ccf0c08f47a99aa71d1b0e52f8d03", "json-3.11.3.tar.gz",  # v3.11.3
           "fed2d5f93608138132e028ad7a45fd0c98ffc87f2451aa00b8cbc809b8c89b20", "NLOHMANN_JSON"),
    Source("google/re2", "4244cd1cb492fa1d10986ec67f862964c073f844", "re2-2021-06-01.tar.gz",  # 2021-06-01
           "56efe3152614cde21a5e4ce6cd663e0062bde8aaa92e641b3b3c8fac49232ae7", "GOOGLERE2"),
)}
MAIN = "onnxruntime-extensions"
# Only the text operators: the tokenizers (byte-level BPE, Unigram, WordPiece) and the string operators.
CMAKE_OPTIONS = ("-DOCOS_ENABLE_CTEST=OFF", "-DOCOS_BUILD_PYTHON=OFF", "-DOCOS_BUILD_SHARED_LIB=ON",
                 "-DOCOS_ENABLE_BLINGFIRE=OFF", "-DOCOS_ENABLE_MATH=OFF", "-DOCOS_ENABLE_DLIB=OFF",
                 "-DOCOS_ENABLE_VISION=OFF", "-DOCOS_ENABLE_AUDIO=OFF", "-DOCOS_ENABLE_TRIE_TOKENIZER=OFF",
                 "-DOCOS_ENABLE_SPM_TOKENIZER=OFF", "-DOCOS_ENABLE_CV2=OFF", "-DOCOS_ENABLE_OPENCV_CODECS=OFF",
                 "-DOCOS_ENABLE_VENDOR_IMAGE_CODECS=OFF")
TARGET = "extensions_shared"
BUILT = f"libortextensions.so.{VERSION}"
ENV = "TRITONIZE_OPERATOR_LIBRARY"  # a built library elsewhere
SOURCE_HINT = (f"on a machine that reaches GitHub and Debian the sources are fetched; elsewhere give the folder holding "
               f"{', '.join(s.archive for s in SOURCES.values())} (`git archive` of each repository at the commits "
               "in tritonize/runtime/operator_library.py) with --sources, and the folder holding "
               f"{HEADERS[0]} with --headers (make backend OPERATOR_SOURCES=DIR BACKEND_SOURCES=DIR)")


def build_dir(root: Path = DEFAULT_ROOT) -> Path:
    return Path(root) / f"ortextensions-{VERSION}"


def _expected_stamp() -> dict:
    return {"version": VERSION, "sources": {name: s.commit for name, s in SOURCES.items()}}


def find(path: Path | None = None) -> Path:
    """The built library, or one line that says how to build it."""
    chosen = path or (Path(os.environ[ENV]) if os.environ.get(ENV) else build_dir() / GRAPH_LIBRARY_FILE)
    if not chosen.is_file():
        raise TritonizeError(f"no tokenizer operator library at {chosen}", hint="build it with `make backend`")
    if path is None and not os.environ.get(ENV) and read_stamp(chosen.parent) != _expected_stamp():
        raise TritonizeError(f"the operator library in {chosen.parent} was built from other sources",
                             hint="rebuild it with `make backend`")
    return chosen


def python_dependencies(library: Path) -> list[str]:
    """What of Python the library needs to load: a libpython NEEDED entry, and undefined Py* symbols."""
    dynamic = subprocess.run(["readelf", "--dynamic", "--wide", str(library)], capture_output=True, text=True,
                             check=True).stdout
    symbols = subprocess.run(["readelf", "--dyn-syms", "--wide", str(library)], capture_output=True, text=True,
                             check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    undefined = [fields[7] for fields in (line.split() for line in symbols.splitlines())
                 if len(fields) >= 8 and fields[6] == "UND"]
    return ([n for n in needed if n.startswith("libpython")]
            + sorted({s.split("@")[0] for s in undefined if s.startswith(("Py", "_Py"))}))


def fetch_sources(cache: Path, github: str = GITHUB, say=print) -> Path:
    """The release's archives fetched from upstream into `cache` (what is there already and checks out is kept),
    under the names a local sources folder has."""
    cache.mkdir(parents=True, exist_ok=True)
    for source in SOURCES.values():
        target = cache / source.archive
        if not (target.is_file() and tree_digest(target, source.keep) == source.digest):
            release.download(f"{github.rstrip('/')}/{source.github}/archive/{source.commit}.tar.gz", target, say,
                             SOURCE_HINT)
    return cache


def _headers(backend_sources: Path | None, root: Path, debian: str, say) -> Path:
    if backend_sources is not None:
        return headers_package(backend_sources)
    cache = root / SOURCES_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / HEADERS[0]
    if not (target.is_file() and release.sha256(target) == HEADERS[1]):
        release.download(f"{debian.rstrip('/')}/pool/main/o/onnxruntime/{HEADERS[0]}", target, say, SOURCE_HINT)
    return headers_package(cache)


def build(sources: Path | None, backend_sources: Path | None = None, root: Path = DEFAULT_ROOT,
          jobs: int | None = None, force: bool = False, say=print, github: str = GITHUB,
          debian: str = DEBIAN) -> Path:
    """Build (or find already built) libortextensions.so from the release sources: the folder `sources`, or
    (None) fetched from upstream; onnxruntime's headers from Debian's package in `backend_sources` (or fetched).
    The library takes onnxruntime's API from the session that registers it, so it links no onnxruntime."""
    target = build_dir(root)
    stamp = _expected_stamp()
    if not force and read_stamp(target) == stamp and (target / GRAPH_LIBRARY_FILE).is_file():
        say(f"operator library up to date in {target}")
        return target / GRAPH_LIBRARY_FILE
    if not shutil.which("g++"):
        raise TritonizeError(f"building {WHAT} needs Debian's g++",
                             hint="sudo apt-get install g++  (make system-deps does it as root)")
    root = Path(root)
    folder = Path(sources) if sources else fetch_sources(root / SOURCES_CACHE, github, say)
    archives = {name: release.held(release.local(folder, s.archive, SOURCE_HINT), s.digest,
                                   lambda p, s=s: tree_digest(p, s.keep), "tree digest", SOURCE_HINT)
                for name, s in SOURCES.items()}
    headers_deb = _headers(backend_sources, root, debian, say)
    start = time.monotonic()
    say(f"building {WHAT} (onnxruntime-extensions {VERSION}, text operators only) ...")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ortextensions-", dir=root) as tmp:
        work = Path(tmp)
        trees = {name: release.extract(archives[name], name, work / "src", s.keep) for name, s in SOURCES.items()}
        headers = unpack_headers(headers_deb, work / "headers")
        out, log = work / "build", root / "operator-library.log"
        log.write_text("")
        fetched = [f"-DFETCHCONTENT_SOURCE_DIR_{s.fetch_content}={trees[name]}"
                   for name, s in SOURCES.items() if s.fetch_content]
        release.run_logged([cmake_program(), "-S", str(trees[MAIN]), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
                            *CMAKE_OPTIONS, f"-DONNXRUNTIME_INCLUDE_DIR={headers}",
                            "-DFETCHCONTENT_FULLY_DISCONNECTED=ON", *fetched], log, WHAT)
        release.run_logged([cmake_program(), "--build", str(out), "--target", TARGET, "-j",
                            str(jobs or os.cpu_count() or 1)], log, WHAT)
        built = out / "lib" / BUILT
        python = python_dependencies(built)
        if python:
            raise TritonizeError(f"the built {WHAT} depends on Python ({', '.join(python[:3])})",
                                 hint=f"the whole log: {log}")
        staged = work / "staged"
        staged.mkdir()
        shutil.copy2(built, staged / GRAPH_LIBRARY_FILE)
        release.write_stamp(staged, stamp)
        shutil.rmtree(target, ignore_errors=True)
        staged.rename(target)
    say(f"built {target / GRAPH_LIBRARY_FILE} in {time.monotonic() - start:.1f}s")
    return target / GRAPH_LIBRARY_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonize.runtime.operator_library",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build libortextensions.so (a no-op when up to date)")
    b.add_argument("--sources", type=Path, default=None,
                   help="the folder of its release archives (see SOURCES); default: fetch them from upstream")
    b.add_argument("--headers", type=Path, default=None,
                   help=f"the folder holding {HEADERS[0]} (onnxruntime's headers; make backend's sources); default: "
                        "fetch it from Debian")
    b.add_argument("--github", default=GITHUB, help="where the release archives are fetched from (default: %(default)s)")
    b.add_argument("--debian", default=DEBIAN, help="the Debian mirror of the headers' package (default: %(default)s)")
    b.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where it is kept (default: %(default)s)")
    b.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: every core)")
    b.add_argument("--force", action="store_true", help="build again even when up to date")
    sub.add_parser("where", help="print the path of the built library")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.sources, args.headers, args.root, args.jobs, args.force, github=args.github, debian=args.debian)
        else:
            print(find())
    except TritonizeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
