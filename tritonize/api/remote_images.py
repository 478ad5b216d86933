"""Images a request names by URL, fetched only from the hosts the operator allows (--allow-image-hosts): by
default none, so a client's URL cannot make the server reach into the network it runs in. Fetched bytes go on as a
data URI's bytes do: the image step in Triton decodes and checks them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import TritonizeError
from .errors import invalid

FETCH_TIMEOUT_S = 10.0  # each image: connecting, the answer and its whole body
DEFAULT_PORTS = {"http": 80, "https": 443}
OPTION = "--allow-image-hosts"


@dataclass(frozen=True)
class RemoteImage:
    """An http(s) URL a request gives as an image, and the field it came in; fetched before the request goes on."""

    url: str
    param: str


def image_hosts(value: str) -> tuple[str, ...]:
    """--allow-image-hosts' HOST[,HOST...]: each a host name or host:port, as a URL writes it (lower case, IDNA,
    [IPv6]); a wildcard, a scheme, a path or a user is refused in one line."""
    entries = [x.strip() for x in value.split(",") if x.strip()]
    hosts = []
    for entry in entries:
        try:
            url = httpx.URL(f"//{entry}")
        except httpx.InvalidURL:
            url = None
        if url is None or not url.host or "*" in entry or url.userinfo or url.raw_path != b"/" or url.query \
                or url.fragment or not (url.port is None or 0 < url.port < 65536):
            raise TritonizeError(f"{OPTION} takes host names and host:port, without schemes, paths or "
                                 f"wildcards ({entry!r} given)")
        hosts.append(url.netloc.decode("ascii"))
    return tuple(dict.fromkeys(hosts))


def allowed(url: httpx.URL, hosts: Sequence[str]) -> bool:
    """Whether `url`'s host[:port] is one of `hosts`, exactly; a host without a port stands for the scheme's own
    port (example.com: http://example.com/ and https://example.com/, not :8080)."""
    if url.scheme not in DEFAULT_PORTS:
        return False
    netloc = url.netloc.decode("ascii")
    return not {netloc, *([f"{netloc}:{DEFAULT_PORTS[url.scheme]}"] if url.port is None else [])}.isdisjoint(hosts)


class ImageFetcher:
    """A request's remote images from the allowed hosts: no redirects, FETCH_TIMEOUT_S each, and no more bytes in
    all than `limit` (--max-body-bytes: a URL holds no more than the request could have carried inline). The hosts
    are reached directly: no proxy or .netrc from the environment."""

    def __init__(self, hosts: Sequence[str], limit: int):
        self.hosts, self.limit = tuple(hosts), limit
        self._client: httpx.AsyncClient | None = None

    async def resolved(self, inputs: Sequence[Any]) -> list[Any]:
        """`inputs` with each RemoteImage replaced by its bytes, fetched together; the first refusal stops the
        rest."""
        remote = {i: self.allowed_url(x) for i, x in enumerate(inputs) if isinstance(x, RemoteImage)}
        out, budget = list(inputs), [self.limit]  # the bytes the request may still take, shared by its fetches
        tasks = [asyncio.ensure_future(self.fetch(url, inputs[i].param, budget)) for i, url in remote.items()]
        try:
            for i, data in zip(remote, await asyncio.gather(*tasks)):
                out[i] = data
        finally:
            for task in tasks:
                task.cancel()
        return out

    def allowed_url(self, image: RemoteImage) -> httpx.URL:
        """The URL as httpx fetches it, where its host is allowed: the host checked is the host connected to."""
        refusal = (f"`{image.param}` is a URL: remote images are not fetched {{}}by this server ({OPTION} names the "
                   "hosts it fetches from); send the image's bytes as a data URI (data:image/png;base64,...)")
        if not self.hosts:
            raise invalid(refusal.format(""), image.param, 400)
        try:
            url = httpx.URL(image.url)
        except httpx.InvalidURL as exc:
            raise invalid(f"`{image.param}` is not a valid URL: {exc}", image.param, 422) from None
        if not allowed(url, self.hosts):
            raise invalid(refusal.format(f"from {url.netloc.decode('ascii')} "), image.param, 400)
        return url

    async def fetch(self, url: httpx.URL, param: str, budget: list[int]) -> bytes:
        """One image's bytes; a redirect, a status besides 200, a failure or a body past the budget refused."""
        host = url.netloc.decode("ascii")
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                async with self.client().stream("GET", url) as response:
                    if response.is_redirect:
                        raise invalid(f"`{param}`: {host} answered {response.status_code}, a redirect, which is not "
                                      f"followed (it could lead off the hosts {OPTION} allows)", param, 400)
                    if response.status_code != 200:
                        raise invalid(f"`{param}`: {host} answered {response.status_code} for the image", param,
                                      400)
                    return await self.body(response, budget, param, host)
        except (TimeoutError, httpx.TimeoutException):
            raise invalid(f"`{param}`: {host} did not send the image within {FETCH_TIMEOUT_S:g} s", param,
                          400) from None
        except httpx.HTTPError as exc:
            said = str(exc) or type(exc).__name__
            raise invalid(f"`{param}`: the image could not be fetched from {host} ({said})", param, 400) from None

    async def body(self, response: httpx.Response, budget: list[int], param: str, host: str) -> bytes:
        chunks = []
        async for chunk in response.aiter_bytes():
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise invalid(f"`{param}`: the image from {host} takes the request's remote images over this "
                              f"server's limit of {self.limit} bytes (--max-body-bytes)", param, 413)
            chunks.append(chunk)
        return b"".join(chunks)

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False, timeout=FETCH_TIMEOUT_S, trust_env=False)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
