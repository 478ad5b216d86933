"""A real HTTP server on loopback for the API's remote images: the files it is given, a redirect at /moved (to
the first file), and 404 for any other path."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

from support.loopback import serving

MOVED = "/moved"


@contextlib.contextmanager
def image_server(files: dict[str, bytes]) -> Iterator[str]:
    """Serves `files` (path -> body) until the block ends; yields its host:port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == MOVED:
                self.send_response(302)
                self.send_header("Location", next(iter(files)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            body = b"no such image" if body is None else body
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # quiet
            pass

    with serving(Handler) as address:
        yield address
