#!/usr/bin/env python3
"""Generate a Triton model repository: `python generate.py --model PATH` (same as `tritonize generate`)."""

import sys

from tritonize.cli import main

if __name__ == "__main__":
    sys.exit(main(["generate", *sys.argv[1:]]))
