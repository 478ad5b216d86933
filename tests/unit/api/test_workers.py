"""`tritonize api --workers N`: what each worker process is started with."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tritonize.api import server
from tritonize.api.state import ApiSettings
from tritonize.errors import TritonizeError


def test_the_in_flight_bound_is_shared_out_and_the_key_stays_out_of_the_settings() -> None:
    settings = ApiSettings(repository=Path("/srv/repo"), api_key="secret-key", max_concurrent_requests=512, workers=3)
    each = server.worker_settings(settings)
    assert each["max_concurrent_requests"] == 171  # 3 x 171 >= 512, and no worker holds more than its share
    assert each["workers"] == 3 and each["repository"] == "/srv/repo"
    assert "secret-key" not in json.dumps(each) and "api_key" not in each


def test_workers_below_one_are_refused_in_one_line() -> None:
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    with pytest.raises(TritonizeError, match="--workers must be positive"):
        server.settings_from(parser.parse_args(["--workers", "0"]))
    assert server.settings_from(parser.parse_args(["--workers", "4"])).workers == 4


def test_local_up_starts_the_api_with_its_workers() -> None:
    """`deploy.py local up --api-workers N`: the API's command line asks for them (the supervisor restarts it from
    that command); one worker is the command as before."""
    from tritonize.api.child import ApiProcess
    from tritonize.runtime.local.cli import api_workers

    assert ApiProcess(Path("r"), "127.0.0.1:8001", workers=3).command()[-2:] == ["--workers", "3"]
    assert ApiProcess(Path("r"), "127.0.0.1:8001", workers=1).command()[-2:] == ["--workers", "1"]  # over a tuned count
    assert "--workers" not in ApiProcess(Path("r"), "127.0.0.1:8001").command()  # the API's own default
    with pytest.raises(TritonizeError, match="--api-workers must be positive"):
        api_workers(0)


def test_the_environment_gives_the_workers_where_no_flag_does(monkeypatch) -> None:
    """Compose sets TRITONIZE_API_WORKERS from API_WORKERS (the image's command stays one line), with /tmp
    writable for the workers' metrics files on its read-only root."""
    import yaml

    from support import REPO_ROOT

    monkeypatch.setenv(server.WORKERS_ENV, "3")
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    assert server.settings_from(parser.parse_args([])).workers == 3
    assert server.settings_from(parser.parse_args(["--workers", "2"])).workers == 2
    monkeypatch.setenv(server.WORKERS_ENV, "three")
    with pytest.raises(TritonizeError, match=r"\$TRITONIZE_API_WORKERS must be a whole number"):
        server.settings_from(parser.parse_args([]))
    # Unset in compose, the API takes the repository's tuned count
    api = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]["api"]
    assert api["environment"][server.WORKERS_ENV] == "${API_WORKERS:-}" and "/tmp" in api["tmpfs"]


def test_the_api_starts_as_many_workers_as_tune_wrote_where_nothing_else_says(tiny_embedding_repo, tmp_path,
                                                                             monkeypatch) -> None:
    """`tritonize tune --api-workers` writes the measured count into the repository's manifest (api_workers);
    the API starts that many where no flag or environment says, and a flag still wins."""
    import shutil

    from tritonize.manifest import read_manifest
    from tritonize.repository import reconfigure
    from tritonize.spec.options import Overrides

    monkeypatch.delenv(server.WORKERS_ENV, raising=False)
    repo = tmp_path / "repo"
    shutil.copytree(tiny_embedding_repo.repository, repo)
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    assert server.settings_from(parser.parse_args(["--repository", str(repo)])).workers == 1  # not measured
    reconfigure(repo, Overrides(api_workers=3))
    assert read_manifest(repo).options.api_workers == 3
    assert server.settings_from(parser.parse_args(["--repository", str(repo)])).workers == 3
    assert server.settings_from(parser.parse_args(["--repository", str(repo), "--workers", "1"])).workers == 1
    monkeypatch.setenv(server.WORKERS_ENV, "2")
    assert server.settings_from(parser.parse_args(["--repository", str(repo)])).workers == 2
    with pytest.raises(TritonizeError, match="--api-workers must be at least 1"):
        reconfigure(repo, Overrides(api_workers=0))


def test_chunked_processing_is_off_unless_the_flag_or_the_environment_turns_it_on(monkeypatch) -> None:
    """The server-wide default a request without enable_chunked_processing gets, and the workers get it too."""
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    plain = server.settings_from(parser.parse_args([]))
    assert (plain.chunked_processing, plain.chunk_overlap) == (False, 0)
    on = server.settings_from(parser.parse_args(["--enable-chunked-processing", "--chunk-overlap", "16"]))
    assert (on.chunked_processing, on.chunk_overlap) == (True, 16)
    assert server.worker_settings(on)["chunked_processing"] is True and server.worker_settings(on)["chunk_overlap"] == 16
    with pytest.raises(TritonizeError, match="--chunk-overlap must be 0 or more"):
        server.settings_from(parser.parse_args(["--chunk-overlap", "-1"]))
    monkeypatch.setenv(server.CHUNKED_ENV, "true")
    monkeypatch.setenv(server.CHUNK_OVERLAP_ENV, "8")
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    assert server.settings_from(parser.parse_args([])).chunked_processing is True
    assert server.settings_from(parser.parse_args([])).chunk_overlap == 8
    assert server.settings_from(parser.parse_args(["--no-enable-chunked-processing"])).chunked_processing is False


def test_coalescing_is_on_unless_the_flag_or_the_environment_turns_it_off(monkeypatch) -> None:
    def settings(*args: str):
        parser = argparse.ArgumentParser()
        server.add_arguments(parser)
        return server.settings_from(parser.parse_args(list(args)))

    monkeypatch.delenv(server.COALESCE_ENV, raising=False)
    assert settings().coalesce and not settings("--no-coalesce").coalesce
    monkeypatch.setenv(server.COALESCE_ENV, "0")
    assert not settings().coalesce and settings("--coalesce").coalesce
    each = server.worker_settings(ApiSettings(repository=Path("r"), coalesce=False, workers=2))
    assert server.settings_of_worker(json.dumps(each)).coalesce is False  # every worker runs as asked
