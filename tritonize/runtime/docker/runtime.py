"""`DockerRuntime`: connects, builds or pulls the image, runs the container spec (container_spec.py) and waits for
readiness; `down` drains before it stops."""

from __future__ import annotations

import io
from typing import Any

from ...console import err
from ...errors import TritonizeError
from .. import machine
from ..base import (
    Endpoints,
    ModelState,
    Runtime,
    ServerOptions,
    ServerStatus,
    drain,
    http_get,
    repository_models,
    require_repository,
    wait_ready,
)
from ..container import (
    BASE_LABEL,
    CONTAINER_PORTS,
    EXIT_TIMEOUT_S,
    LABEL_PREFIX,
    MIN_TRITON_RELEASE,
    STOP_GRACE_S,
    base_image,
    health_digest,
    image_pins,
    pins_label,
    release_is_patched,
    render_dockerfile,
)
from .container_spec import ContainerSpec, DockerOptions, bind_address, container_spec, reach_address
from .engine import _follow, _Progress, connect


class DockerRuntime(Runtime):
    """Triton in NVIDIA's container, started and stopped through the docker SDK."""

    def __init__(self, options: ServerOptions, docker_options: DockerOptions | None = None):
        super().__init__(options)
        self.docker_options = docker_options or DockerOptions()

    # -- helpers
    def spec(self) -> ContainerSpec:
        return container_spec(self.options, self.docker_options)

    def _container(self, client: Any) -> Any | None:
        from docker.errors import NotFound

        try:
            return client.containers.get(self.docker_options.container_name)
        except NotFound:
            return None

    def _ensure_image(self, client: Any, image: str) -> None:
        from docker.errors import ImageNotFound
        from docker.utils import parse_repository_tag

        opts = self.docker_options
        if opts.pull:
            repository, tag = parse_repository_tag(image)
            with _Progress(f"pulling {image}") as progress:
                _follow(client.api.pull(repository, tag=tag or "latest", stream=True, decode=True), progress, "pull")
            return
        base = opts.base_image or base_image(opts.release)
        if not opts.build:
            try:
                labels = client.images.get(image).labels or {}
                if opts.image or (labels.get(f"{LABEL_PREFIX}.pins") == pins_label(image_pins())
                                  and labels.get(f"{LABEL_PREFIX}.health-sha256") == health_digest()
                                  and labels.get(BASE_LABEL) == base):
                    return
                err.print(f"{image} was built from another lock, base image or script; rebuilding")
            except ImageNotFound:
                pass
        with _Progress(f"building {image} from {base}") as progress:
            dockerfile = render_dockerfile(opts.release).encode()
            stream = client.api.build(
                fileobj=io.BytesIO(dockerfile),
                tag=image,
                buildargs={"TRITON_RELEASE": opts.release, "BASE_IMAGE": base},
                network_mode=opts.build_network,
                rm=True,
                forcerm=True,
                decode=True,
                timeout=None,
            )
            _follow(stream, progress, "image build")

    def _last_event(self, container: Any) -> str:
        try:
            tail = container.logs(tail=40).decode("utf-8", "replace").splitlines()
        except Exception:  # noqa: BLE001 - progress text only
            return ""
        for line in reversed(tail):
            if "loading:" in line or "successfully loaded" in line or "failed to load" in line:
                return line.split("] ", 1)[-1][:80]
        return ""

    # -- Runtime
    def up(self) -> Endpoints:
        from docker.errors import APIError

        require_repository(self.options.repository)
        if self.docker_options.pull and not self.docker_options.image:
            # The default name is only ever built here; pulling it could fetch a stranger's image.
            raise TritonizeError("--pull needs --image REGISTRY/NAME:TAG", hint="or drop --pull to build the image here")
        spec = self.spec()
        if not release_is_patched(self.docker_options.release):
            err.print(
                f"[yellow]warning:[/] Triton {self.docker_options.release} predates {MIN_TRITON_RELEASE} and lacks "
                "the fixes for the 2025 Python-backend and HTTP-server CVEs"
            )
        client = connect()
        self._ensure_image(client, spec.image)

        stale = self._container(client)
        if stale is not None:
            if (stale.labels or {}).get(f"{LABEL_PREFIX}.managed") != "true":
                raise TritonizeError(
                    f"a container named {spec.name} exists and was not started by tritonize",
                    hint="choose another --container-name",
                )
            err.print(f"replacing container {spec.name} ({stale.status})")
            stale.remove(force=True)
        try:
            container = client.containers.run(**spec.run_kwargs())
        except APIError as exc:
            raise self._run_error(exc) from None

        endpoints = Endpoints(
            reach_address(bind_address(self.options.host)),
            self.options.http_port,
            self.options.grpc_port,
            self.options.metrics_port,
        )

        def is_alive() -> bool:
            container.reload()
            return container.status in ("created", "running")

        last = {"t": 0.0, "event": ""}
        with _Progress(f"waiting for Triton in {spec.name} to load the models") as progress:

            def on_tick(elapsed: float) -> None:
                if elapsed - last["t"] >= 2.0:
                    last["t"] = elapsed
                    last["event"] = self._last_event(container) or last["event"]
                progress.update(f"{elapsed:.0f}s {last['event']}".rstrip())

            try:
                wait_ready(endpoints, self.options.timeout_s, is_alive, on_tick)
            except TritonizeError as exc:
                try:
                    log = container.logs(tail=300).decode("utf-8", "replace")
                    for line in machine.error_lines(log):
                        err.print(f"  {line}", markup=False, highlight=False)
                    container.stop(timeout=10)  # no restart loop; kept for `logs`
                except APIError:
                    pass  # already gone; the error below still holds
                raise TritonizeError(
                    f"{exc.message} (container {spec.name})",
                    hint="full log: python deploy.py docker logs; remove it: python deploy.py docker down",
                ) from None
        return endpoints

    def _run_error(self, exc: Any) -> TritonizeError:
        text = str(getattr(exc, "explanation", None) or exc)
        gpu_markers = ("could not select device driver", "nvidia-container-cli", "unknown or invalid runtime name")
        if any(marker in text for marker in gpu_markers):
            return TritonizeError(
                f"the engine cannot give the container a GPU ({text.strip()[:160]})",
                hint="install the NVIDIA Container Toolkit, or serve on CPU: --gpus none "
                "with a repository generated with --device cpu",
            )
        if "port is already allocated" in text or "address already in use" in text:
            return TritonizeError(
                f"a port is already in use ({text.strip()[:160]})",
                hint="stop what holds it, or choose --http-port/--grpc-port/--metrics-port",
            )
        return TritonizeError(f"the container could not start: {text.strip()[:200]}")

    def down(self, timeout_s: float | None = None) -> bool:
        timeout_s = EXIT_TIMEOUT_S if timeout_s is None else timeout_s
        client = connect()
        container = self._container(client)
        if container is None:
            err.print(f"no container named {self.docker_options.container_name}")
            return False
        # Triton 2.51 refuses new requests to every model on SIGTERM, the steps of an ensemble included: the
        # requests already in flight finish first (drain), then SIGTERM, then SIGKILL after the grace period.
        if container.status == "running":
            waited = drain(self._published_endpoints(container), timeout_s)
            err.print(f"drained in {waited:.1f}s", markup=False, highlight=False)
        container.stop(timeout=max(int(timeout_s) + STOP_GRACE_S - EXIT_TIMEOUT_S, STOP_GRACE_S))
        container.remove()
        err.print(f"[green]✓[/] container {self.docker_options.container_name} stopped and removed")
        return True

    def status(self) -> ServerStatus:
        client = connect()
        container = self._container(client)
        name = self.docker_options.container_name
        if container is None:
            return ServerStatus(running=False, ready=False, detail=f"no container named {name}")
        state = container.attrs.get("State", {})
        health = (state.get("Health") or {}).get("Status", "")
        detail = f"container {name}: {container.status}" + (f", {health}" if health else "")
        if container.status != "running":
            return ServerStatus(running=False, ready=False, detail=detail)
        endpoints = self._published_endpoints(container)
        ready = http_get(f"{endpoints.http}/v2/health/ready", timeout=2.0)[0] == 200
        models: list[ModelState] = repository_models(endpoints)
        return ServerStatus(running=True, ready=ready, endpoints=endpoints, models=models, detail=detail)

    def _published_endpoints(self, container: Any) -> Endpoints:
        """The endpoints as the engine published them, whatever flags `status` got."""
        published = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}

        def host_port(port: int, fallback: int) -> tuple[str, int]:
            bindings = published.get(f"{port}/tcp") or []
            if not bindings:
                return reach_address(bind_address(self.options.host)), fallback
            return reach_address(bindings[0].get("HostIp", "")), int(bindings[0]["HostPort"])

        if (container.attrs.get("HostConfig") or {}).get("NetworkMode") == "host":
            flags = dict(arg[2:].split("=", 1) for arg in container.attrs["Config"]["Cmd"] if "=" in arg)
            return Endpoints(reach_address(flags.get("http-address", "")), int(flags["http-port"]),
                             int(flags["grpc-port"]), int(flags["metrics-port"]))
        host, http_port = host_port(CONTAINER_PORTS["http"], self.options.http_port)
        _, grpc_port = host_port(CONTAINER_PORTS["grpc"], self.options.grpc_port)
        _, metrics_port = host_port(CONTAINER_PORTS["metrics"], self.options.metrics_port)
        return Endpoints(host, http_port, grpc_port, metrics_port)

    def logs(self, tail: int | None = None) -> str:
        client = connect()
        container = self._container(client)
        if container is None:
            raise TritonizeError(
                f"no container named {self.docker_options.container_name}",
                hint="start one: python deploy.py docker up",
            )
        return container.logs(tail=tail if tail else "all").decode("utf-8", "replace")
