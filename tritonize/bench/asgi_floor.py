"""The floor under the HTTP API: an empty ASGI endpoint on the API's own server stack (uvicorn as `tritonize api`
runs it), answering each OpenAI-style /v1/embeddings request with as many vectors as it holds texts, each the
`dim` float32 values a stand-in answers, written by orjson, as the API writes its answers. Nothing else happens,
so its CPU per request is what the server stack and writing the answer cost; the API's figure above it is the
API's own work.

    python -m tritonize.bench.asgi_floor --port 8099 --dim 384
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ..paths import child_pythonpath

LABEL = "empty ASGI"  # its process, in the run's CPU figures


def answer_values(width: int) -> np.ndarray:
    """What every vector a stand-in answers holds, and the floor writes: `width` float32 values from a fixed
    seed, spread as a unit vector's are. Varied, as a real answer's values are: orjson writes one value repeated
    (a constant 1/3) 1.6x as fast as a real embedding's (4.5 against 7.2 µs a row of 384 values), so a fill
    would understate what writing a real answer costs."""
    values = np.random.default_rng(0).standard_normal(width) / np.sqrt(width)
    return values.astype(np.float32)


def make_app(dim: int):
    """An ASGI app: GET answers {"status": "ok"}; POST reads the body, counts its `input` texts and answers that
    many vectors of `dim` values."""
    rows = answer_values(dim).reshape(1, dim)

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if scope["method"] == "POST":
            texts = orjson.loads(body).get("input")
            n = 1 if isinstance(texts, str) else len(texts)
            vectors = np.broadcast_to(rows, (n, dim))
            payload = orjson.dumps({"object": "list", "data": [{"object": "embedding", "index": i, "embedding": v}
                                                               for i, v in enumerate(vectors)],
                                    "model": "floor", "usage": {"prompt_tokens": 0, "total_tokens": 0}},
                                   option=orjson.OPT_SERIALIZE_NUMPY)
        else:
            payload = b'{"status":"ok"}'
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]})
        await send({"type": "http.response.body", "body": payload})

    return app


@dataclass
class FloorProcess:
    """The floor in a process of its own (its own group, as the API's), healthy before it is used."""

    port: int
    dim: int
    log_file: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> str:
        from ..api.child import wait_healthy

        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", __name__, "--port", str(self.port), "--dim",
                                          str(self.dim)], stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "PYTHONPATH": child_pythonpath()})
        finally:
            if self.log_file:
                out.close()
        try:
            wait_healthy(self.url, lambda: self.proc.poll() is None, 30.0, self.log_file)
        except Exception:
            self.__exit__()
            raise
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
            self.proc = None


def main() -> None:
    import uvicorn

    from ..api.server import UVICORN

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dim", type=int, required=True)
    args = p.parse_args()
    uvicorn.run(make_app(args.dim), **{**UVICORN, "host": "127.0.0.1", "port": args.port})


if __name__ == "__main__":
    main()
