"""Infinity's engines as the bench names them, for the tests that compare against Infinity."""


from __future__ import annotations

from tritonize.bench import infinity

ENGINES = tuple(infinity.ENGINES)
