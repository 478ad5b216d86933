"""The tokenizer graphs' operator library (onnxruntime-extensions' text operators) built from its release sources
by `make backend`: it loads where no Python runs, its sources are held to their digests from a folder or from
upstream, and every server tritonize starts finds it by its bare name."""

from __future__ import annotations

import glob
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from support import REPO_ROOT as ROOT
from support import upstream
from tritonize.errors import TritonizeError
from tritonize.runtime import operator_library as ol
from tritonize.runtime.sources import tree_digest
from tritonize.serving import watchdog
from tritonize.spec import GRAPH_LIBRARY_FILE

SOURCES = ROOT.parent / "shared" / "vendor" / f"onnxruntime-extensions-{ol.VERSION}"


def sources_or_skip() -> Path:
    if not SOURCES.is_dir():
        pytest.skip(f"no release sources at {SOURCES}")
    return SOURCES


def built_or_skip() -> Path:
    try:
        return ol.find()
    except TritonizeError as exc:
        pytest.skip(str(exc))


def test_the_built_library_needs_no_python_where_the_wheels_module_does() -> None:
    """No libpython among its NEEDED entries and no undefined Py* symbol; the check itself finds both in a
    Python extension module (onnxruntime's own binding)."""
    library = built_or_skip()
    assert ol.python_dependencies(library) == []
    import onnxruntime

    (binding,) = glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "onnxruntime_pybind11_state*.so"))
    assert any(s.startswith("Py") for s in ol.python_dependencies(Path(binding)))


def test_the_built_library_is_the_releases_and_building_it_again_is_a_no_op() -> None:
    sources_or_skip()
    library = built_or_skip()
    stamp = json.loads((library.parent / "build.json").read_text())
    assert stamp == {"version": ol.VERSION, "sources": {name: s.commit for name, s in ol.SOURCES.items()}}
    said: list[str] = []
    again = ol.build(SOURCES, None, library.parent.parent, say=said.append)
    assert again == library and said == [f"operator library up to date in {library.parent}"]


def _whole_tree(trimmed: Path, target: Path, top: str, extra: str) -> Path:
    """A trimmed archive as upstream's archive of the commit holds it: another top folder, and a file under a
    folder the trimmed one left out (`extra`)."""
    upstream.repack(trimmed, target, top)
    with tarfile.open(target) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    with tarfile.open(target, "w:gz") as out:
        for member, data in members:
            out.addfile(member, io.BytesIO(data) if data is not None else None)
        added = tarfile.TarInfo(f"{top}/{extra}")
        added.size = 4
        out.addfile(added, io.BytesIO(b"test"))
    return target


def test_a_trimmed_archive_and_upstreams_whole_tree_have_one_digest_and_a_change_is_refused(tmp_path: Path) -> None:
    sources = sources_or_skip()
    main = ol.SOURCES[ol.MAIN]
    trimmed = sources / main.archive
    whole = _whole_tree(trimmed, tmp_path / "whole.tar.gz", f"onnxruntime-extensions-{main.commit}", "test/x.py")
    assert tree_digest(trimmed, main.keep) == tree_digest(whole, main.keep) == main.digest
    assert tree_digest(whole) != main.digest  # the whole tree's own digest differs: the filter is what agrees
    changed = shutil.copytree(sources, tmp_path / "changed")
    (changed / main.archive).chmod(0o644)
    upstream.repack(trimmed, changed / main.archive, "x", change="CMakeLists.txt")
    with pytest.raises(TritonizeError, match=f"{main.archive} has tree digest [0-9a-f]{{64}}, not the release's") as info:
        ol.build(changed, None, tmp_path / "built", say=lambda _: None)
    assert "\n" not in info.value.message and not (tmp_path / "built").exists()


def test_without_a_folder_the_sources_are_fetched_from_upstream_and_checked(tmp_path: Path) -> None:
    """Against a loopback stand-in for GitHub: fetched under a folder's names and held to the same digests; what
    the cache holds already is not fetched again; out of reach, one line that says how to build offline."""
    sources = sources_or_skip()
    root = tmp_path / "upstream"
    for source in ol.SOURCES.values():
        upstream.repack(sources / source.archive, root / source.github / "archive" / f"{source.commit}.tar.gz",
                        f"{source.github.split('/')[1]}-{source.commit}")
    said: list[str] = []
    with upstream.served(root) as url:
        cache = ol.fetch_sources(tmp_path / "cache", url, say=said.append)
        assert len([s for s in said if s.startswith("fetching ")]) == len(ol.SOURCES)
        assert all(tree_digest(cache / s.archive, s.keep) == s.digest for s in ol.SOURCES.values())
        said.clear()
        ol.fetch_sources(cache, url, say=said.append)
        assert said == []
    (tmp_path / "nothing").mkdir()
    with upstream.served(tmp_path / "nothing") as url, pytest.raises(TritonizeError, match="could not fetch") as info:
        ol.fetch_sources(tmp_path / "other", url, say=lambda _: None)
    assert "\n" not in info.value.message and "--sources" in info.value.hint


def test_a_missing_library_is_one_line_that_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(TritonizeError, match="no tokenizer operator library at") as info:
        ol.find(tmp_path / GRAPH_LIBRARY_FILE)
    assert "make backend" in info.value.hint


def test_the_serving_images_entrypoint_puts_the_repositorys_library_folders_on_the_library_path(tmp_path: Path) -> None:
    """Wherever the repository is mounted (its --model-repository flag), each model folder holding the library
    leads LD_LIBRARY_PATH, before what the environment had; without one, the environment is as it was."""
    assert watchdog.OPERATOR_LIBRARY == GRAPH_LIBRARY_FILE
    repo = tmp_path / "mounted" / "here"
    for model in ("a_model", "a_tokenizer", "b_model"):
        (repo / model).mkdir(parents=True)
    for model in ("a_model", "a_tokenizer"):
        (repo / model / GRAPH_LIBRARY_FILE).write_bytes(b"\x7fELF")
    command = ["tritonserver", f"--model-repository={repo}", "--http-port=8000"]
    env = watchdog.operator_library_path(command, {"LD_LIBRARY_PATH": "/opt/x", "PATH": "/bin"})
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [str(repo / "a_model"), str(repo / "a_tokenizer"), "/opt/x"]
    assert env["PATH"] == "/bin"
    (repo / "a_model" / GRAPH_LIBRARY_FILE).unlink()
    (repo / "a_tokenizer" / GRAPH_LIBRARY_FILE).unlink()
    assert watchdog.operator_library_path(command, {"PATH": "/bin"}) == {"PATH": "/bin"}
