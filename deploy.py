#!/usr/bin/env python3
"""Serve a repository: `python deploy.py local up` or `python deploy.py docker up` (same as `tritonize deploy`)."""

import sys

from tritonize.cli import main

if __name__ == "__main__":
    sys.exit(main(["deploy", *sys.argv[1:]]))
