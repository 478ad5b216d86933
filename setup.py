"""The package list, the one thing pyproject.toml cannot say: every package under tritonize/ is found (so a new
task's package needs no line anywhere), and templates/, at the top of the checkout, is carried as
tritonize.templates (package-dir in pyproject.toml)."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["tritonize", "tritonize.*"]), "tritonize.templates"])
