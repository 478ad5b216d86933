"""Infinity, the embedding server a user might deploy instead of Triton, as a bench peer.

Infinity (`infinity-emb` on PyPI) runs from a virtualenv of its own, as a
child process: version 0.0.78 needs sentence-transformers < 4 (so
transformers 4), rich < 14 and uvicorn < 0.33, and installed beside this
project it would downgrade the stack repositories are exported and tested
with. `python -m tritonize.bench.infinity install` (`make infinity`) makes
that virtualenv; bench finds it at `.venv-infinity`, or is given
`--infinity-python`.

Two of its engines are measured, each with Infinity's own defaults
(dynamic batches of up to 32 texts, torch's or onnxruntime's own thread
count): `torch` (sentence-transformers on CPU) and `optimum` (onnxruntime
through optimum). Infinity 0.0.78's optimum engine cannot open a local
folder as given: it passes the ONNX file's absolute path where optimum 2
wants a name relative to the folder, and a folder without an ONNX file has
nothing to load. So that engine gets a folder of its own, the source's files
linked plus optimum's export of the encoder (`last_hidden_state`, what the
engine pools), and starts from inside it with `--model-id .`.

    python -m tritonize.bench.infinity install [--venv .venv-infinity] [--torch 2.13.0]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import TritonizeError
from .peers import ChildServer
from .load import JSON_HEADERS

VERSION = "0.0.78"
# optimum[onnxruntime] for the ONNX engine; server and torch for the HTTP server and the torch engine.
REQUIREMENTS = (f"infinity-emb[server,torch,optimum]=={VERSION}",)
VENV = Path(".venv-infinity")
STAMP = ".tritonize-infinity"  # inside the virtualenv: what it was installed with
INSTALL_HINT = "make infinity  (or: python -m tritonize.bench.infinity install)"
PROBE_TIMEOUT_S = 60.0
EXPORT_TIMEOUT_S = 900.0
ANSWER = "embedding"  # the output the floor's answers carry, and Infinity's /embeddings gives
ONNX_POOLINGS = ("mean", "cls")  # what the optimum engine's --pooling-method can do
THREADS = "library default: torch / onnxruntime, one per core (as the doc server)"


@dataclass(frozen=True)
class Engine:
    """One of Infinity's engines, as a bench system."""

    label: str
    engine: str  # Infinity's --engine


ENGINES = {
    "infinity": Engine("Infinity, torch", "torch"),
    "infinity-onnx": Engine("Infinity, ONNX (optimum)", "optimum"),
}


class Unavailable(Exception):
    """Why an Infinity engine cannot be measured, in one line."""


@dataclass(frozen=True)
class Install:
    """An Infinity interpreter bench can start."""

    python: Path
    version: str

    def to_dict(self) -> dict:
        return {"python": str(self.python), "version": self.version, "threads": THREADS}


def venv_python(venv: Path) -> Path:
    return Path(venv) / "bin" / "python"


def locate(explicit: str | Path | None = None) -> Install:
    """The interpreter given, or the default virtualenv's; Unavailable when none has Infinity."""
    # Absolute, not resolved: a virtualenv's python is a link it must be started through.
    python = Path(os.path.abspath(explicit or venv_python(VENV)))
    if not python.exists():
        where = f"--infinity-python {explicit}" if explicit else f"{VENV}/"
        raise Unavailable(f"Infinity is not installed ({where} not found)")
    probe = "import importlib.metadata as m; print(m.version('infinity_emb'))"
    try:
        done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{python} cannot run: {exc}") from None
    if done.returncode != 0:
        raise Unavailable(f"{python} has no infinity_emb installed")
    return Install(python, done.stdout.strip())


def failure_reason(log: str) -> str:
    """The exception that stopped Infinity, as one line (its last `SomeError: message` line)."""
    found = re.findall(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", log, flags=re.MULTILINE)
    if found:
        kind, message = found[-1]
        return f"{kind}: {message.strip()}"[:300]
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


def warnings_of(log: str) -> list[str]:
    """Infinity's own warnings (a failed graph optimisation, for one), one line each."""
    lines = [line.split("WARNING:", 1)[-1] for line in log.splitlines() if "infinity_emb WARNING" in line]
    # Its log lines end with the source file and line, after a run of spaces.
    return [re.sub(r"\s{2,}[\w.]+\.py:\d+\s*$", "", line).strip()[:300] for line in lines]


class InfinityServer(ChildServer):
    """`with InfinityServer(...) as url:` serves the model folder with one Infinity engine on a free port.

    Everything it writes (its cache, the ONNX engine's folder and optimised
    graph) stays in `work_dir`; it is told not to send usage statistics.
    """

    def __init__(self, install: Install, engine: Engine, model_folder: str, name: str, pooling: str,
                 work_dir: Path, host: str = "127.0.0.1"):
        super().__init__(Path(work_dir) / "infinity.log", host)
        self.label = f"Infinity ({engine.engine} engine)"
        self.install, self.engine, self.name, self.pooling = install, engine, name, pooling
        self.source = Path(model_folder).resolve()
        self.work_dir = Path(work_dir).resolve()
        self.onnx_folder = self.work_dir / "model"

    def command(self, port: int) -> list[str]:
        model = "." if self.engine.engine == "optimum" else str(self.source)
        cmd = [str(self.install.python), "-m", "infinity_emb.cli", "v2", "--model-id", model,
               "--served-model-name", self.name, "--engine", self.engine.engine, "--device", "cpu",
               "--host", self.host, "--port", str(port), "--log-level", "warning"]
        if self.engine.engine == "optimum" and self.pooling in ONNX_POOLINGS:
            # Its default pools the CLS token; a user passes the model's own pooling.
            cmd += ["--pooling-method", self.pooling]
        return cmd

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update({
            "DO_NOT_TRACK": "1",
            "INFINITY_ANONYMOUS_USAGE_STATS": "false",
            "INFINITY_HOME": str(self.work_dir),
            "HF_HUB_OFFLINE": "1",  # a local folder: nothing to fetch
            "HF_HUB_CACHE": str(self.work_dir / "hub"),  # where the ONNX engine keeps its optimised graph
            "COLUMNS": "300",  # one log line per message, so failures read as one line
        })
        return env

    def cwd(self) -> Path:
        return self.onnx_folder if self.engine.engine == "optimum" else self.work_dir

    def __enter__(self) -> str:
        if self.work_dir.exists():
            shutil.rmtree(self.work_dir)
        self.work_dir.mkdir(parents=True)
        if self.engine.engine == "optimum":
            self._stage_onnx_folder()
        try:
            return super().__enter__()
        except TritonizeError:
            raise Unavailable(failure_reason(self.log_tail(20000)) if self.log_file.exists() else "did not start") from None

    def _stage_onnx_folder(self) -> None:
        """The source's files linked, plus optimum's ONNX export of its encoder unless it ships ONNX files."""
        self.onnx_folder.mkdir()
        for item in self.source.iterdir():
            (self.onnx_folder / item.name).symlink_to(item)
        if any(self.source.rglob("*.onnx")):
            return
        export = self.work_dir / "export"
        cmd = [str(self.install.python), "-m", "optimum.exporters.onnx", "--model", str(self.source),
               "--task", "feature-extraction", "--library-name", "transformers", str(export)]
        log = self.work_dir / "export.log"
        with open(log, "wb") as out:
            try:
                done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      env=self.env(), timeout=EXPORT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise Unavailable(f"optimum's ONNX export took over {EXPORT_TIMEOUT_S:.0f}s") from None
        if done.returncode != 0 or not (export / "model.onnx").exists():
            raise Unavailable("optimum's ONNX export failed: " + failure_reason(log.read_text(errors="replace")))
        shutil.move(str(export / "model.onnx"), self.onnx_folder / "model.onnx")
        shutil.rmtree(export)

    def warnings(self) -> list[str]:
        return warnings_of(self.log_tail(20000))


def ask(url: str, name: str, row: tuple[str, ...], timeout_s: float = 60.0) -> dict:
    """One row's answer from Infinity's OpenAI-style /embeddings, as the floor names it."""
    body = json.dumps({"model": name, "input": [row[0]]}, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(f"{url.rstrip('/')}/embeddings", data=body, method="POST",
                                     headers=JSON_HEADERS)
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:  # noqa: S310 - loopback
        return {ANSWER: json.loads(resp.read())["data"][0]["embedding"]}


# -- install -------------------------------------------------------------------


def torch_pin() -> str:
    """This environment's torch version, so the virtualenv gets the same (CPU) build, not a resolver's pick."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch").split("+")[0]
    except PackageNotFoundError:
        raise TritonizeError("torch is not installed here: pass --torch VERSION") from None


def install(venv: Path = VENV, torch: str | None = None, quiet: bool = False) -> Path:
    """Make (or bring up to date) the virtualenv Infinity runs from; its python."""
    venv = Path(venv)
    wanted = [f"torch=={torch or torch_pin()}", *REQUIREMENTS]
    stamp = venv / STAMP
    python = venv_python(venv)
    if python.exists() and stamp.exists() and stamp.read_text().split() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # torch pinned in the same command: left alone, a resolver would pull a multi-GB CUDA build.
    cmd = [str(python), "-m", "pip", "install", *(["-q"] if quiet else []), *wanted]
    if subprocess.run(cmd).returncode != 0:
        raise TritonizeError(f"installing Infinity into {venv} failed", hint=" ".join(cmd))
    stamp.write_text("\n".join(wanted) + "\n")
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonize.bench.infinity", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help="make the virtualenv bench starts Infinity from")
    p.add_argument("--venv", type=Path, default=VENV, help="(default: %(default)s)")
    p.add_argument("--torch", default=None, help="torch version to pin (default: this environment's)")
    p.add_argument("--quiet", "-q", action="store_true")
    args = parser.parse_args(argv)
    try:
        python = install(args.venv, args.torch, args.quiet)
    except TritonizeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Infinity {locate(python).version} is ready: {python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
