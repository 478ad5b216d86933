#!/usr/bin/env python3
"""Send raw strings to a tritonize model over GRPC; print embeddings or labels.

    python clients/grpc_client.py "first text" "second text" --url 127.0.0.1:8001
"""

import sys

import _cli

if __name__ == "__main__":
    sys.exit(_cli.run_sync("grpc", __doc__.splitlines()[0]))
