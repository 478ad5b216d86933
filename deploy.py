#!/usr/bin/env python3
"""Serve a repository: `python deploy.py local up` or `python deploy.py docker up` (same as `tritonize deploy`),
or write Kubernetes manifests for it: `python deploy.py k8s render` (same as `tritonize k8s render`)."""

import sys

from tritonize.cli import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(main(argv if argv[:1] == ["k8s"] else ["deploy", *argv]))
