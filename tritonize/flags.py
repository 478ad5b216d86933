"""Parsed flags into a command's typed options, one way for every command: each field from the flag of its name,
a field whose flag is named otherwise through `renamed`, and what the command decides itself as `values`."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def options_from(kind: type[T], args: argparse.Namespace, renamed: Mapping[str, str] | None = None,
                 **values: Any) -> T:
    """`kind` (a dataclass) from the flags: a field with no flag and no value keeps its default."""
    fields = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    renamed = dict(renamed or {})
    strays = sorted((set(renamed) | set(values)) - fields)
    if strays:
        raise TypeError(f"{kind.__name__} has no field {', '.join(strays)}")
    flags = vars(args)
    taken = {name: flags[renamed.get(name, name)] for name in fields - set(values) if renamed.get(name, name) in flags}
    return kind(**taken, **values)
