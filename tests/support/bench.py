"""Helpers shared by several test modules."""


from __future__ import annotations

from tritonize.bench import infinity

ENGINES = tuple(infinity.ENGINES)
