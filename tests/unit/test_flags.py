"""Parsed flags into typed options, one way for every command (tritonize/flags.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from tritonize.flags import options_from


@dataclass
class Options:
    name: str = "a"
    timeout_s: float = 1.0
    workers: int = 1
    kept: str = "default"


def test_each_field_from_its_flag_a_renamed_one_and_the_commands_own_values() -> None:
    args = argparse.Namespace(name="b", timeout=5.0, workers=3, unrelated="x")
    got = options_from(Options, args, renamed={"timeout_s": "timeout"}, workers=4)
    assert got == Options(name="b", timeout_s=5.0, workers=4, kept="default")


def test_a_stray_field_name_is_an_error() -> None:
    with pytest.raises(TypeError, match="Options has no field timeout"):
        options_from(Options, argparse.Namespace(), timeout=2.0)
    with pytest.raises(TypeError, match="no field nme"):
        options_from(Options, argparse.Namespace(), renamed={"nme": "name"})


def test_every_command_reads_its_flags_through_it() -> None:
    """The commands that build options from flags parse them here, with their defaults as the parser gives them."""
    from tritonize.api import server
    from tritonize.bench import cli as bench
    from tritonize.k8s import cli as k8s
    from tritonize.runtime import cli as runtime

    sub = argparse.ArgumentParser().add_subparsers()
    for module in (bench, server, runtime, k8s):
        module.register(sub)
    served = runtime.options_from_args(sub.choices["deploy"].parse_args(["local", "up", "--timeout", "7"]))
    assert served.timeout_s == 7.0 and served.host == "127.0.0.1"
    settings = server.settings_from(sub.choices["api"].parse_args(["--enable-chunked-processing", "--workers", "2"]))
    assert settings.chunked_processing is True and settings.workers == 2
    bench_options = bench.options_from_args(sub.choices["bench"].parse_args(["-r", "repo", "--url", "http://h:1",
                                                                              "--timeout", "9"]))
    assert bench_options.http_url == "http://h:1" and bench_options.timeout_s == 9.0
