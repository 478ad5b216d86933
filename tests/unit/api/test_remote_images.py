"""Remote images: fetched only from the hosts --allow-image-hosts names, from a real server on loopback."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from support.image_server import MOVED, image_server
from tritonize.api import server
from tritonize.api.errors import ApiError
from tritonize.api.remote_images import ImageFetcher, RemoteImage, allowed, image_hosts
from tritonize.api.routes.parameters import image_of
from tritonize.errors import TritonizeError
from tritonize.runtime.machine import free_ports

LIMIT = 100_000


@pytest.fixture(scope="module")
def png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def host(png):
    with image_server({"/cat.png": png, "/big": b"x" * (LIMIT + 1), "/half": b"y" * (LIMIT // 2 + 1)}) as where:
        yield where


def resolved(inputs: list, hosts: tuple[str, ...], limit: int = LIMIT) -> list:
    async def run() -> list:
        fetcher = ImageFetcher(hosts, limit)
        try:
            return await fetcher.resolved(inputs)
        finally:
            await fetcher.close()

    return asyncio.run(run())


def refusal(inputs: list, hosts: tuple[str, ...]) -> ApiError:
    with pytest.raises(ApiError) as refused:
        resolved(inputs, hosts)
    return refused.value


def test_a_host_entry_is_a_name_or_name_and_port_matched_exactly() -> None:
    assert image_hosts("") == ()
    assert image_hosts(" Example.COM, 127.0.0.1:8080,[::1]:81, example.com") == (
        "example.com", "127.0.0.1:8080", "[::1]:81")
    for bad in ("*.example.com", "http://example.com", "example.com/images", "user@example.com", "example.com:0",
                "example.com?x", ":80"):
        with pytest.raises(TritonizeError, match="--allow-image-hosts takes host names and host:port"):
            image_hosts(bad)
    hosts = image_hosts("example.com,127.0.0.1:8080")
    yes = ["http://example.com/a.png", "https://EXAMPLE.com:443/a.png", "http://example.com:80/",
           "http://127.0.0.1:8080/x", "http://example.com@127.0.0.1:8080/x"]
    no = ["http://example.com:8080/", "http://sub.example.com/", "http://example.com.evil.net/",
          "http://127.0.0.1/x", "http://127.0.0.1:8080@evil.net/", "ftp://example.com/"]
    assert [allowed(httpx.URL(u), hosts) for u in yes] == [True] * len(yes)
    assert [allowed(httpx.URL(u), hosts) for u in no] == [False] * len(no)


def test_a_url_is_read_as_a_remote_image_and_data_uris_as_bytes() -> None:
    assert image_of("https://example.com/cat.png", "input[0].image") == RemoteImage("https://example.com/cat.png",
                                                                                   "input[0].image")
    assert image_of(" HTTP://example.com/a ", "p") == RemoteImage("HTTP://example.com/a", "p")


def test_an_allowed_host_gives_the_images_bytes_in_place(host, png) -> None:
    url = RemoteImage(f"http://{host}/cat.png", "input[1].image")
    assert resolved(["a text", url, b"bytes", url], (host,)) == ["a text", png, b"bytes", png]


def test_nothing_is_fetched_unless_its_host_is_allowed(host) -> None:
    url = RemoteImage(f"http://{host}/cat.png", "images[0]")
    none = refusal([url], ())
    assert (none.status, none.param) == (400, "images[0]")
    assert "remote images are not fetched by this server" in none.message and "--allow-image-hosts" in none.message
    other = refusal([url], ("example.com",))
    assert other.status == 400 and f"not fetched from {host} by this server" in other.message
    assert "--allow-image-hosts" in other.message
    port = host.split(":")[1]
    assert f"from 127.0.0.1:{port} " in refusal([url], (f"localhost:{port}",)).message  # names differ: refused
    assert refusal([RemoteImage("http://[::1", "p")], (host,)).status == 422


@pytest.mark.parametrize("path, status, said", [
    (MOVED, 400, "answered 302, a redirect, which is not followed"),
    ("/missing.png", 400, "answered 404 for the image"),
    ("/big", 413, f"over this server's limit of {LIMIT} bytes (--max-body-bytes)"),
])
def test_the_allowed_hosts_answers_are_refused_in_one_line(host, path: str, status: int, said: str) -> None:
    refused = refusal([RemoteImage(f"http://{host}{path}", "messages[0].content.image_url.url")], (host,))
    assert (refused.status, refused.param) == (status, "messages[0].content.image_url.url")
    assert said in refused.message and host in refused.message, refused.message


def test_a_requests_images_share_one_bound(host) -> None:
    half = RemoteImage(f"http://{host}/half", "images[0]")
    assert len(resolved([half], (host,))[0]) == LIMIT // 2 + 1
    assert refusal([half, RemoteImage(f"http://{host}/half", "images[1]")], (host,)).status == 413


def test_a_host_that_does_not_answer_is_named() -> None:
    (port,) = free_ports(1)
    refused = refusal([RemoteImage(f"http://127.0.0.1:{port}/cat.png", "images[0]")], (f"127.0.0.1:{port}",))
    assert refused.status == 400 and f"could not be fetched from 127.0.0.1:{port}" in refused.message


def test_the_option_reaches_the_settings_and_the_workers() -> None:
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    assert server.settings_from(parser.parse_args([])).image_hosts == ()
    settings = server.settings_from(parser.parse_args(["--allow-image-hosts", "images.internal,127.0.0.1:9000"]))
    assert settings.image_hosts == ("images.internal", "127.0.0.1:9000")
    again = server.settings_of_worker(json.dumps(server.worker_settings(settings)))
    assert again.image_hosts == settings.image_hosts and again.repository == Path("triton_repo")
    with pytest.raises(TritonizeError, match="without schemes"):
        server.settings_from(parser.parse_args(["--allow-image-hosts", "https://images.internal"]))
