"""A front door for Triton's HTTP protocol (KServe v2): its routes served by the API over gRPC, each body bounded
and parsed before Triton sees it (front.py: routes and answers; bodies.py: reading and checking a request;
answers.py: the gRPC messages and the JSON Triton's HTTP port writes). Triton 2.51's own HTTP parser can be
brought down by one request (docs/reliability.md); through the front, such a request is a 4xx."""

from .bodies import media_refusal
from .front import OPEN, Front, Route, route

__all__ = ["OPEN", "Front", "Route", "media_refusal", "route"]
