#!/usr/bin/env python3
"""Send raw strings to a tritonize model over gRPC; print embeddings or labels.

    python clients/grpc_client.py "first text" "second text" --url 127.0.0.1:8001
"""

import sys

import _cli

from tritonize.client import ServerError, TextClient


def main() -> int:
    args = _cli.parser("grpc", __doc__.splitlines()[0]).parse_args()
    args.model = _cli.model_name(args)
    texts = _cli.read_texts(args)
    try:
        with TextClient(args.url, args.model, protocol="grpc", timeout_s=args.timeout) as client:
            classifier = _cli.is_classifier(client.output_names())
            results = client.infer_many(
                _cli.requests(args, texts), args.concurrency, top_k=args.top_k if classifier else 0
            )
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return _cli.report(results, classifier, args)


if __name__ == "__main__":
    sys.exit(main())
