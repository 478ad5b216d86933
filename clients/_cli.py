"""What the client scripts share: flags, reading texts, printing results.

The scripts run from a checkout without installation, so the repository root
is put on sys.path before `tritonize` is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tritonize.client import RequestResult, chunks  # noqa: E402
from tritonize.spec import TEXT_INPUT  # noqa: E402
from tritonize.tasks.contract import TaskContract  # noqa: E402

DEFAULT_URLS = {"grpc": "127.0.0.1:8001", "http": "127.0.0.1:8000"}


def parser(protocol: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("texts", nargs="*", help="texts to send (default: --file, or stdin one per line)")
    p.add_argument("--file", "-f", type=Path, help="read texts from a file, one per line")
    p.add_argument("--url", default=os.environ.get(f"TRITON_{protocol.upper()}_URL", DEFAULT_URLS[protocol]))
    p.add_argument("--model", "-m", help="ensemble name (default: --repository's only model)")
    p.add_argument("--repository", type=Path, default=Path("triton_repo"), help="where to read the default model name")
    p.add_argument("--concurrency", "-c", type=int, default=1, help="requests in flight at once")
    p.add_argument("--batch-size", "-b", type=int, default=8, help="texts per request")
    p.add_argument("--top-k", "-k", type=int, default=1, help="labels shown per text (classifiers)")
    p.add_argument("--query", "--question", "-q", dest="query",
                   help="rerankers: the query every text (document) is scored against; QA: the question every text (context) answers")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a summary")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    return p


def model_name(args: argparse.Namespace) -> str:
    """--model, else TRITON_MODEL, else the repository's only model."""
    if args.model:
        return args.model
    if os.environ.get("TRITON_MODEL"):
        return os.environ["TRITON_MODEL"]
    from tritonize.runtime.base import served_manifests

    names = [m.name for m in served_manifests(args.repository)]
    if not names:
        sys.exit(f"error: no --model given and no {args.repository / 'tritonize.yaml'} to read it from")
    if len(names) > 1:
        sys.exit(f"error: {args.repository} serves {len(names)} models ({', '.join(names)}): pass --model NAME")
    return names[0]


def read_texts(args: argparse.Namespace) -> list[str]:
    if args.texts:
        texts = list(args.texts)
    elif args.file:
        texts = args.file.read_text(encoding="utf-8").splitlines()
    elif not sys.stdin.isatty():
        texts = sys.stdin.read().splitlines()
    else:
        sys.exit("error: no texts (pass them as arguments, with --file, or on stdin)")
    texts = [t for t in texts if t.strip()] if not args.texts else texts
    if not texts:
        sys.exit("error: no texts")
    return texts


def requests(args: argparse.Namespace, texts: Sequence[str], task: TaskContract) -> list:
    """Requests of --batch-size texts; for a pair model (a reranker's QUERY and TEXT, QA's QUESTION and
    CONTEXT) the texts fill the second input and --query the first, repeated."""
    batches = chunks(list(texts), args.batch_size)
    names = [t.name for t in task.text_inputs]
    if len(names) == 1:
        return batches
    if not task.sample_first:  # the second input is no text of its own (a late-interaction row's form)
        return [task.request([task.row_for(t) for t in b]) for b in batches]
    if not args.query:
        sys.exit(f"error: {args.model} takes {names[0]} besides the texts ({names[1]}): pass --query")
    return [{names[0]: [args.query] * len(b), names[1]: b} for b in batches]


def shown_texts(texts) -> Sequence:
    """The texts a request carried (the documents or contexts, for pairs)."""
    if not isinstance(texts, dict):
        return texts
    return texts.get(TEXT_INPUT) or list(texts.values())[-1]


def report(results: Sequence[RequestResult], task: TaskContract, args: argparse.Namespace) -> int:
    """Print every text's answer, decoded by the model's task; exit status 1 if any request failed."""
    rows, failed = [], 0
    for res in results:
        if res.error is not None:
            failed += 1
            print(f"error: {res.error}", file=sys.stderr)
            continue
        assert res.outputs is not None
        for text, row in zip(shown_texts(res.texts), task.rows(res.outputs)):
            rows.append({"text": text, **row})
    if args.json:
        print(json.dumps({"model": args.model, "results": rows}))
    else:
        for i, row in enumerate(rows):
            print(f"[{i}] {task.summary_line(row)}  {_short(row['text'])}")
    return 1 if failed else 0


def _short(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def run_sync(protocol: str, description: str) -> int:
    """The whole of grpc_client.py and http_client.py: they differ only in protocol."""
    from tritonize.client import ServerError, TextClient

    args = parser(protocol, description).parse_args()
    args.model = model_name(args)
    texts = read_texts(args)
    try:
        with TextClient(args.url, args.model, protocol=protocol, timeout_s=args.timeout) as client:
            task = client.task()
            outputs, top_k = task.client_request(args.top_k)
            results = client.infer_many(requests(args, texts, task), args.concurrency, outputs=outputs, top_k=top_k)
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return report(results, task, args)
