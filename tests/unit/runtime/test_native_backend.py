"""Triton's onnxruntime backend built from its release sources (`make backend`), and the local server's choice of
variant: what is refused, in one line, before anything is built or started."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support import REPO_ROOT as ROOT
from support import upstream
from tritonize.errors import TritonizeError
from tritonize.runtime import native_backend
from tritonize.runtime.instance import Instance
from tritonize.runtime.local import LocalRuntime
from tritonize.spec import FUSED_CONFIG_NAME, FUSED_VARIANT, PRODUCTION_VARIANT, VARIANT_CONFIGS

SOURCES = ROOT.parent / "shared" / "vendor" / f"triton-{native_backend.RELEASE}"


def sources_or_skip() -> Path:
    if not SOURCES.is_dir():
        pytest.skip(f"no release sources at {SOURCES}")
    return SOURCES


def test_an_archive_whose_tree_is_not_the_releases_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    sources = shutil.copytree(sources_or_skip(), tmp_path / "sources")
    name = f"triton-core-{native_backend.RELEASE}.tar.gz"
    (sources / name).chmod(0o644)
    upstream.repack(SOURCES / name, sources / name, "core", change="CMakeLists.txt")  # one file changed
    with pytest.raises(TritonizeError, match=f"{name} has tree digest [0-9a-f]{{64}}, not the release's") as info:
        native_backend.build(sources, tmp_path / "built", say=lambda _: None)
    assert "\n" not in info.value.message and not (tmp_path / "built").exists()


def test_githubs_archive_of_a_commit_and_git_archive_of_it_have_one_tree_digest(tmp_path: Path) -> None:
    """Another top folder and another compression: the same tree, the same digest, so the release's digests hold
    archives fetched from GitHub and those of a local folder alike."""
    sources_or_skip()
    for repo, (commit, digest) in native_backend.SOURCES.items():
        local = SOURCES / f"triton-{repo}-{native_backend.RELEASE}.tar.gz"
        github = upstream.repack(local, tmp_path / f"{repo}-{commit}.tar.gz", f"{repo}-{commit}")
        assert github.read_bytes() != local.read_bytes()
        assert native_backend.tree_digest(local) == native_backend.tree_digest(github) == digest


def test_without_a_folder_the_sources_are_fetched_from_upstream_and_checked(tmp_path: Path) -> None:
    """Against loopback stand-ins for GitHub and Debian's pool: fetched into the cache under a folder's names and
    held to the same digests; what the cache holds already is not fetched again; a changed archive is refused."""
    sources_or_skip()
    root = upstream.upstream_layout(SOURCES, tmp_path / "upstream")
    said: list[str] = []
    with upstream.served(root) as url:
        cache = native_backend.fetch_sources(tmp_path / "cache", f"{url}/github", f"{url}/debian", say=said.append)
        assert len([s for s in said if s.startswith("fetching ")]) == len(native_backend.SOURCES) + 1
        for repo, (commit, digest) in native_backend.SOURCES.items():
            assert native_backend.tree_digest(cache / f"triton-{repo}-{native_backend.RELEASE}.tar.gz") == digest
        said.clear()
        native_backend.fetch_sources(cache, f"{url}/github", f"{url}/debian", say=said.append)
        assert said == []
    changed = upstream.upstream_layout(SOURCES, tmp_path / "changed", change=("backend", "CMakeLists.txt"))
    with upstream.served(changed) as url, pytest.raises(TritonizeError, match="has tree digest .*not the release's"):
        native_backend.build(None, tmp_path / "built", say=lambda _: None, github=f"{url}/github",
                             debian=f"{url}/debian")


def test_an_upstream_out_of_reach_is_one_line_that_says_how_to_build_offline(tmp_path: Path) -> None:
    with upstream.served(tmp_path) as url, pytest.raises(TritonizeError, match="could not fetch http") as info:
        native_backend.fetch_sources(tmp_path / "cache", f"{url}/nothing", f"{url}/nothing", say=lambda _: None)
    assert "\n" not in info.value.message and "--sources" in info.value.hint


def test_a_missing_archive_names_itself_and_where_the_sources_come_from(tmp_path: Path) -> None:
    with pytest.raises(TritonizeError, match="no triton-onnxruntime_backend-r24.10.tar.gz in") as info:
        native_backend.build(tmp_path, tmp_path / "built", say=lambda _: None)
    assert "git archive" in info.value.hint


def test_the_built_backend_is_the_one_for_this_onnxruntime_and_rebuilding_it_is_a_no_op() -> None:
    """`make backend` ran before the suite: its folder is stamped with the sources' commits and the sha256 of the
    onnxruntime library it links, which is the locked wheel's own; a second build only says it is up to date."""
    sources_or_skip()
    try:
        backend = native_backend.find()
    except TritonizeError as exc:
        pytest.skip(str(exc))
    stamp = json.loads((backend.directory / native_backend.STAMP).read_text())
    assert stamp["sources"] == {repo: commit for repo, (commit, _) in native_backend.SOURCES.items()}
    assert (backend.directory / native_backend.ONNXRUNTIME_SONAME).read_bytes() == \
        native_backend.onnxruntime_library().read_bytes()
    needed = subprocess.run(["readelf", "-d", str(backend.library)], capture_output=True, text=True, check=True).stdout
    assert "[libonnxruntime.so.1]" in needed and "[libtritonserver.so]" in needed  # both found beside it at serve time
    assert "Library runpath: [${ORIGIN}]" in needed
    said: list[str] = []
    again = native_backend.build(SOURCES, backend.directory.parent, say=said.append)
    assert again.directory == backend.directory and said == [f"onnxruntime backend up to date in {backend.directory}"]


def test_a_folder_without_a_backend_is_refused_with_how_to_build_one(tmp_path: Path) -> None:
    with pytest.raises(TritonizeError, match="no native onnxruntime backend in") as info:
        native_backend.find(tmp_path)
    assert "make backend" in info.value.hint and "--variant fused" in info.value.hint


def test_production_without_a_backend_is_refused_before_the_server_starts(tiny_embedding_repo, local_options,
                                                                          tmp_path: Path) -> None:
    options = local_options(tiny_embedding_repo.repository, tmp_path / "run")
    runtime = LocalRuntime(options, quiet=True, variant=PRODUCTION_VARIANT, onnxruntime_backend=tmp_path / "empty")
    with pytest.raises(TritonizeError, match="no native onnxruntime backend in"):
        runtime.up()
    assert runtime.server_pid is None and not runtime.status().running


def test_an_unknown_variant_is_refused(tiny_embedding_repo, local_options, tmp_path: Path) -> None:
    with pytest.raises(TritonizeError, match="unknown variant 'container'"):
        LocalRuntime(local_options(tiny_embedding_repo.repository, tmp_path / "run"), variant="container")


@pytest.mark.parametrize("variant", list(VARIANT_CONFIGS))
def test_each_variant_selects_its_configs_and_the_record_reads_it_back(variant: str, tiny_embedding_repo, local_options,
                                                                       tmp_path: Path) -> None:
    from tritonize.runtime.local import find_install

    runtime = LocalRuntime(local_options(tiny_embedding_repo.repository, tmp_path / "run"), variant=variant)
    command = runtime.command(find_install(), tmp_path / "backends")
    named = [a for a in command if a.startswith("--model-config-name=")]
    assert named == ([f"--model-config-name={FUSED_CONFIG_NAME}"] if variant == FUSED_VARIANT else [])
    record = Instance(pid=0, start_ticks=None, repository="", host="", reach_host="", http_port=0, grpc_port=0,
                      metrics_port=0, command=command, started_at=0.0)
    assert record.variant == variant
