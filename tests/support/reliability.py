"""What the reliability tests send and check: background traffic with every request recorded, malformed
requests, a step's live stub, the supervisor's log and recoveries."""


from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tritonize.client import TextClient
from tritonize.serving.texts import graph_refusal
from tritonize.runtime import instance, machine
from tritonize.runtime.local import LocalRuntime
from tritonize.runtime.machine import group_processes
from tritonize.spec import DEFAULT_MAX_REQUEST_BYTES


def post_json(url: str, body: bytes, headers: dict | None = None, timeout: float = 60.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def json_body(text: str) -> bytes:
    return json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}).encode()


@dataclass(frozen=True)
class Sent:
    """One request of the background traffic: when it started and ended, and whether it was answered."""

    start: float
    end: float
    ok: bool


class Traffic:
    """A few clients sending one text each in a loop (50 ms pause after a failure), every request recorded."""

    def __init__(self, grpc_url: str, model: str, clients: int = 4):
        self.sent: list[Sent] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(grpc_url, model)) for _ in range(clients)]

    def _client(self, grpc_url: str, model: str) -> None:
        with TextClient(grpc_url, model, timeout_s=10) as client:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    client.embed(["under load"])
                    self.sent.append(Sent(start, time.monotonic(), True))
                except Exception:  # noqa: BLE001 - every failure counts, none stops the load
                    self.sent.append(Sent(start, time.monotonic(), False))
                    time.sleep(0.05)

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def answered_again(self, since: float, timeout_s: float) -> float | None:
        """Seconds from `since` to the end of the first request sent after it that was answered; None if none
        was within timeout_s. A request sent after a kill goes through the dead stub until it is replaced."""
        while time.monotonic() - since < timeout_s:
            answered = [r.end for r in list(self.sent) if r.ok and r.start > since]
            if answered:
                return min(answered) - since
            time.sleep(0.02)
        return None

    def failed(self, start: float, end: float = float("inf")) -> int:
        return sum(1 for r in list(self.sent) if not r.ok and start <= r.start < end)


def live_stub(directory: Path, step: str, timeout_s: float = 10.0) -> int:
    """The pid of a live stub of the step in the server the instance's record names now: the newest (after a
    reload Triton may still be ending an old instance's stub itself, and a kill of that one would be absorbed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        inst = instance.read_instance(directory)
        stubs = instance.stub_models(inst.pid) if inst else {}
        found = [pid for pid, model in stubs.items() if model.endswith(f"_{step}")]
        if found:
            return max(found, key=lambda pid: machine.start_ticks(pid) or 0)
        time.sleep(0.02)
    raise AssertionError(f"no live {step} stub in {directory} after {timeout_s:.0f} s")


def kill_dead(pid: int, timeout_s: float = 5.0) -> None:
    """SIGKILL a stub and return once it is dead (a zombie): the kernel ends a stub holding large shared-memory
    mappings some milliseconds after the signal, and until then nothing can see it has died."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while not machine.is_zombie(pid) and Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"stub {pid} still runs {timeout_s:.0f} s after SIGKILL")
        time.sleep(0.001)


def supervisor_log(runtime: LocalRuntime) -> str:
    return (runtime.directory / instance.SUPERVISOR_LOG_FILE).read_text()


def stop_and_check(runtime: LocalRuntime) -> None:
    """`down` stops the supervisor and the server it watches now, quickly, and leaves no process behind."""
    record = instance.read_instance(runtime.directory)  # the supervisor keeps it, through restarts too
    start = time.monotonic()
    runtime.down()
    assert time.monotonic() - start < 10.0  # no 30 s exit timeout, no SIGKILL
    assert record is not None and group_processes(record.pid) == []
    state = instance.read_supervisor(runtime.directory)
    assert state is not None and state.state == "stopped" and not state.alive()
RECOVERY_S = 15.0


def recorded(runtime: LocalRuntime, recoveries: int, timeout_s: float = 10.0) -> None:
    """Wait until the supervisor has counted this many recoveries and watches again: it logs a restart once its
    own readiness poll sees the server, which can be just after a client's first answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = instance.read_supervisor(runtime.directory)
        if state.restarts + state.reloads >= recoveries and state.state == "watching":
            return
        time.sleep(0.02)
    raise AssertionError(f"the supervisor has not recorded recovery {recoveries}:\n{supervisor_log(runtime)}")


def binary_body(text: bytes, declared: int) -> tuple[bytes, dict]:
    """A KServe binary-extension request whose TEXT tensor declares `declared` bytes."""
    payload = len(text).to_bytes(4, "little") + text
    header = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": declared}}]}).encode()
    return header + payload, {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}


def tensor_json(datatype: str, shape: list, data: list) -> bytes:
    return json.dumps({"inputs": [{"name": "TEXT", "shape": shape, "datatype": datatype, "data": data}]}).encode()


BAD_REQUESTS = {
    "wrong datatype": (tensor_json("INT32", [1, 1], [1]), {}),
    "shape without a batch axis": (tensor_json("BYTES", [1], ["hello"]), {}),
    "batch over the maximum": (tensor_json("BYTES", [65, 1], ["hello"] * 65), {}),
    "data shorter than the shape": (tensor_json("BYTES", [4, 1], ["hello"]), {}),
    "binary length beyond the body": binary_body(b"hello", 4096),
    "binary length short of the tensor": binary_body(b"hello world", 3),
    "malformed JSON": (b'{"inputs": [{"name": "TEXT", ', {}),
    "empty body": (b"", {}),
    "request over the byte bound": (json_body("x" * (DEFAULT_MAX_REQUEST_BYTES + 1)), {}),
}


def assert_refused_and_still_serving(http: str, name: str, case: str) -> None:
    """BAD_REQUESTS[case] gets a clear error, and the next request is answered."""
    body, headers = BAD_REQUESTS[case]
    code, answer = post_json(f"{http}/v2/models/{name}/infer", body, headers)
    error = json.loads(answer or b"{}").get("error", "")
    print(f"{case}: HTTP {code}: {error[:120]}")
    # Malformed JSON gets 500 from Triton 2.51's HTTP frontend, and so does a texts step's refusal (its graph's node
    # failing by design: Triton's onnxruntime backend answers every onnxruntime error as internal), with the step's
    # own line (docs/reliability.md); every other case a 4xx.
    answered_500 = case == "malformed JSON" or graph_refusal(error) is not None
    assert (code == 500) if answered_500 else (400 <= code < 500), (code, error)
    assert error
    assert post_json(f"{http}/v2/models/{name}/infer", json_body("still serving"))[0] == 200
