#!/usr/bin/env python3
"""Send raw strings to a tritonize model over HTTP; print embeddings or labels.

    python clients/http_client.py "first text" "second text" --url 127.0.0.1:8000
"""

import sys

import _cli

if __name__ == "__main__":
    sys.exit(_cli.run_sync("http", __doc__.splitlines()[0]))
