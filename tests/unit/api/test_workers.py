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
