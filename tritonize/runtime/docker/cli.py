"""`deploy.py docker`'s own flags (`add_arguments`) and the `DockerRuntime` they describe (`from_args`); the flags
every runtime shares, `--variant` among them, are runtime/cli.py's."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ...spec import PRODUCTION_VARIANT
from ..base import ServerOptions
from ..container import DEFAULT_SHM_SIZE, DEFAULT_TRITON_RELEASE, IMAGE_REPOSITORY, MIN_TRITON_RELEASE, ULIMITS
from .container_spec import CONTAINER_NAME, DockerOptions, parse_gpus
from .runtime import DockerRuntime

CONTAINER_VARIANT = PRODUCTION_VARIANT  # NVIDIA's container serves each step's config.pbtxt unless told



def parse_ulimit(value: str) -> tuple[str, int, int]:
    """`NAME=SOFT[:HARD]` (-1: unlimited), as `docker run --ulimit` takes it."""
    name, sep, limits = value.partition("=")
    soft, _, hard = limits.partition(":")
    try:
        if not sep or not name.isalpha():
            raise ValueError
        return name, int(soft), int(hard or soft)
    except ValueError:
        raise ValueError(f"--ulimit takes NAME=SOFT[:HARD], e.g. memlock=8388608; got {value!r}") from None


def with_ulimits(values: list[str]) -> tuple[tuple[str, int, int], ...]:
    """ULIMITS with the given ones replacing those of the same name (a host that cannot raise memlock, say)."""
    given = {name: (name, soft, hard) for name, soft, hard in map(parse_ulimit, values)}
    return tuple(given.pop(name, (name, soft, hard)) for name, soft, hard in ULIMITS) + tuple(given.values())


def _checked_by(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """An argparse type that keeps the text and refuses, in parse's words, what parse cannot read."""

    def check(value: str) -> str:
        try:
            parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = DockerOptions()
    g = parser.add_argument_group("container")
    g.add_argument("--release", default=d.release, help=f"Triton release to build on (default: %(default)s; "
                   f"{MIN_TRITON_RELEASE}+ has the 2025 CVE fixes)")
    g.add_argument("--image", default=None, help=f"serving image (default: {IMAGE_REPOSITORY}:<release>-py3, built here)")
    how = g.add_mutually_exclusive_group()
    how.add_argument("--build", action="store_true", help="rebuild the image even if it exists")
    how.add_argument("--pull", action="store_true", help="pull --image from its registry instead of building")
    g.add_argument("--gpus", type=_checked_by(parse_gpus), default=d.gpus,
                   help="all, none (CPU; generate with --device cpu), a count, or device=0,1 (default: %(default)s)")
    g.add_argument("--shm-size", default=d.shm_size, help="/dev/shm for Python-backend instances (default: %(default)s)")
    g.add_argument("--container-name", default=d.container_name, help="(default: %(default)s)")
    g.add_argument("--base-image", default=None,
                   help="build the serving image on this image instead of NVIDIA's (a test stand-in: docs/container.md)")
    g.add_argument("--network", default=None, help="the container's network; host: Triton binds --host's ports itself")
    g.add_argument("--build-network", default=None, help="the image build's network (pip must reach PyPI)")
    g.add_argument("--ulimit", type=_checked_by(parse_ulimit), action="append", default=[], metavar="NAME=SOFT[:HARD]",
                   help="replace one of the container's ulimits (default: memlock=-1, stack=67108864); a host "
                   "without CAP_SYS_RESOURCE cannot raise memlock")


def config_name_from_args(options: ServerOptions, args: argparse.Namespace) -> str | None:
    """The deprecated `--config-name` as given, else the configs `--variant` selects (the container's default is
    production: each model's config.pbtxt)."""
    from ...repository import variant_config  # the repository package loads jinja2: not while building the CLI

    name = getattr(args, "config_name", None)
    if name is not None:
        return name
    return variant_config(options.repository, getattr(args, "variant", None) or CONTAINER_VARIANT)


def from_args(options: ServerOptions, args: argparse.Namespace) -> DockerRuntime:
    docker_options = DockerOptions(
        image=getattr(args, "image", None),
        release=getattr(args, "release", DEFAULT_TRITON_RELEASE),
        build=bool(getattr(args, "build", False)),
        pull=bool(getattr(args, "pull", False)),
        gpus=getattr(args, "gpus", "all"),
        shm_size=getattr(args, "shm_size", DEFAULT_SHM_SIZE),
        container_name=getattr(args, "container_name", CONTAINER_NAME),
        base_image=getattr(args, "base_image", None),
        config_name=config_name_from_args(options, args),
        network=getattr(args, "network", None),
        build_network=getattr(args, "build_network", None),
        ulimits=with_ulimits(getattr(args, "ulimit", None) or []),
    )
    return DockerRuntime(options, docker_options)
