"""Builders and helpers the tests share: model folders built at test time, servers, references, clients."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: generate.py, deploy.py, templates/, tests/
