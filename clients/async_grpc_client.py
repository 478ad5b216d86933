#!/usr/bin/env python3
"""Send raw strings over asyncio gRPC, many requests in flight; print results and throughput.

    python clients/async_grpc_client.py --file texts.txt --concurrency 32 --batch-size 1
"""

import asyncio
import sys
import time

import _cli

from tritonize.client import AsyncTextClient, RequestResult, ServerError
from tritonize.tasks.contract import TaskContract


async def run(args, texts) -> tuple[TaskContract, list, list[RequestResult], float]:
    async with AsyncTextClient(args.url, args.model, timeout_s=args.timeout) as client:
        task = await client.task()
        batches = _cli.requests(args, texts, task)
        outputs, top_k = task.client_request(args.top_k)
        start = time.perf_counter()
        results = await client.infer_many(batches * args.repeat, args.concurrency, outputs=outputs, top_k=top_k)
        return task, batches, results, time.perf_counter() - start


def main() -> int:
    p = _cli.parser("grpc", __doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1, help="send the texts this many times (throughput runs)")
    p.set_defaults(concurrency=16)
    args = p.parse_args()
    args.model = _cli.model_name(args)
    try:
        task, batches, results, elapsed = asyncio.run(run(args, _cli.read_texts(args)))
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    status = _cli.report(results[: len(batches)], task, args)
    ok = [r for r in results if r.ok]
    latencies = sorted(r.latency_s for r in ok) or [0.0]
    texts = sum(len(_cli.shown_texts(r.texts)) for r in ok)
    print(
        f"{len(ok)}/{len(results)} requests ok, {texts / elapsed:.1f} texts/s, "
        f"latency p50 {latencies[len(latencies) // 2] * 1e3:.1f} ms, "
        f"p95 {latencies[int(len(latencies) * 0.95)] * 1e3:.1f} ms (concurrency {args.concurrency})",
        file=sys.stderr,
    )
    return status or (0 if len(ok) == len(results) else 1)


if __name__ == "__main__":
    sys.exit(main())
