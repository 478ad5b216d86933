"""Every program outside Python that the package and the tests run, found in their source, and where each one
comes from on this machine: the lock (a wheel's script beside the interpreter) or a Debian package that the
Makefile installs (`make system-deps`, `make system-deps-container`). A program installed by hand resolves to
neither, so the suite fails where a fresh machine would.

Found by reading the code (ast), not by running it:
- `shutil.which("x")`, `find_program("x")`, and calls of any function that hands its parameter to one of them
  (`need("promtool")`), with that parameter's default where it has one (`find_binary(name=BINARY)`);
- subprocess argument lists whose first element is a string (`subprocess.run(["cmake", ...])`), also through a
  name bound to such a list or to `os.environ.get("VAR", "x")`, and through any function that hands its
  parameter to subprocess as the argument list (`_run(["cmake", ...], log)`).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tritonize.paths import find_program

from . import REPO_ROOT

FINDERS = {"which", "find_program"}  # shutil.which, tritonize.paths.find_program
RUNNERS = {"run", "Popen", "check_output", "check_call", "call", "create_subprocess_exec", "execv", "execvp"}
RUNNER_MODULES = {"subprocess", "asyncio", "os"}  # subprocess.run, asyncio.create_subprocess_exec, os.execv
SOURCES = ("tritonize", "tests", "clients", "generate.py", "deploy.py")
CONTAINER_TESTS = Path("tests") / "container"  # run only by `make test-container`, after its own packages


@dataclass(frozen=True)
class Call:
    """One place that runs an external program; `env` names the variable that may point elsewhere."""

    program: str
    where: str  # path:line
    env: str | None = None

    @property
    def container_only(self) -> bool:
        return Path(self.where.split(":")[0]).parts[:2] == CONTAINER_TESTS.parts


def _name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _env_default(node: ast.AST) -> tuple[str, str] | None:
    """`os.environ.get("VAR", "x")` / `os.getenv("VAR", "x")` -> ("x", "VAR")."""
    if isinstance(node, ast.Call) and _name(node.func) in {"get", "getenv"} and len(node.args) == 2:
        var, default = _string(node.args[0]), _string(node.args[1])
        if var and default:
            return default, var
    return None


class _Module:
    """One file's bindings and functions, as far as the scan needs them."""

    def __init__(self, path: Path, tree: ast.Module):
        self.path, self.tree = path, tree
        self.constants: dict[str, tuple[str, str | None]] = {}  # NAME -> (program, env var)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = _string(node.value)
                found = (value, None) if value else _env_default(node.value)
                if found:
                    self.constants[node.targets[0].id] = found

    def where(self, node: ast.AST) -> str:
        path = self.path.relative_to(REPO_ROOT) if REPO_ROOT in self.path.parents else self.path
        return f"{path}:{node.lineno}"


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _lists(function: ast.AST) -> dict[str, ast.List | ast.Tuple]:
    """Names bound to a list or tuple literal in this function (the last binding wins)."""
    bound = {}
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.List, ast.Tuple))):
            bound[node.targets[0].id] = node.value
    return bound


def _runs(call: ast.Call) -> bool:
    """subprocess.run(...), Popen(...): not every `.run` (onnxruntime's session has one)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr in RUNNERS and isinstance(func.value, ast.Name) and func.value.id in RUNNER_MODULES
    return isinstance(func, ast.Name) and func.id == "Popen"


def _finds(call: ast.Call) -> bool:
    return _name(call.func) in FINDERS


def _passes_parameter(function, matches) -> str | None:
    """The parameter this function hands, as the first argument, to a call that `matches`."""
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)]
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and matches(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Name) and arg.id in params:
                return arg.id
    return None


def _default(function, param: str) -> ast.expr | None:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return defaults.get(param)


def _argument(call: ast.Call, function, param: str) -> ast.expr | None:
    """What a call passes for `param` of `function` (keyword or position)."""
    for keyword in call.keywords:
        if keyword.arg == param:
            return keyword.value
    names = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if names and names[0] in {"self", "cls"}:
        names = names[1:]
    return call.args[names.index(param)] if param in names and names.index(param) < len(call.args) else None


def scan(files: list[Path]) -> list[Call]:
    """Every external program these files run (see the module's docstring for how it is found)."""
    modules = [_Module(p, ast.parse(p.read_text(encoding="utf-8"), filename=str(p))) for p in files]
    # Functions that hand a parameter to a finder, or to subprocess as the argument list: name -> (def, param).
    finders: dict[str, tuple] = {}
    runners: dict[str, tuple] = {}
    for module in modules:
        for function in _functions(module.tree):
            param = _passes_parameter(function, _finds)
            if param:
                finders[function.name] = (module, function, param)
            param = _passes_parameter(function, _runs)
            if param:  # called by its bare name in its own module (`_run([...])`)
                runners[(module.path, function.name)] = (module, function, param)
    calls: list[Call] = []

    def program_of(node: ast.expr | None, module: _Module, lists: dict) -> tuple[str, str | None] | None:
        if node is None:
            return None
        if _string(node):
            return _string(node), None
        if isinstance(node, ast.Name) and node.id in module.constants:
            return module.constants[node.id]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr in module.constants:
            return module.constants[node.attr]  # mon.BINARY read through its module
        return _env_default(node)

    def first_of(node: ast.expr | None, module: _Module, lists: dict) -> tuple[str, str | None] | None:
        if isinstance(node, ast.Name) and node.id in lists:
            node = lists[node.id]
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts and not isinstance(node.elts[0], ast.Starred):
            return program_of(node.elts[0], module, lists)
        return None

    for module in modules:
        for function in [module.tree, *_functions(module.tree)]:
            lists = _lists(function)
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                name = _name(node.func)
                found = None
                local = (module.path, name) if isinstance(node.func, ast.Name) else None
                if _finds(node) and node.args:
                    found = program_of(node.args[0], module, lists)
                elif _runs(node) and node.args:
                    found = first_of(node.args[0], module, lists)
                elif name in finders:
                    _, defined, param = finders[name]
                    found = program_of(_argument(node, defined, param), module, lists)
                elif local in runners:
                    _, defined, param = runners[local]
                    found = first_of(_argument(node, defined, param), module, lists)
                if found:
                    calls.append(Call(found[0], module.where(node), found[1]))
    # A finder's default is a program too (`find_binary(name=BINARY)` called with no name).
    for module, function, param in finders.values():
        found = program_of(_default(function, param), module, {})
        if found:
            calls.append(Call(found[0], module.where(function), found[1]))
    return sorted(set(calls), key=lambda c: (c.program, c.where))


def project_files() -> list[Path]:
    files: list[Path] = []
    for source in SOURCES:
        path = REPO_ROOT / source
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def makefile_packages() -> dict[str, list[str]]:
    """The Debian packages the Makefile installs, by target (`make -s system-packages`)."""
    done = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO_ROOT), "system-packages"],
                          capture_output=True, text=True, check=True, timeout=60)
    lists = {}
    for line in done.stdout.splitlines():
        target, _, packages = line.partition(":")
        lists[target.strip()] = packages.split()
    return lists


def _owner(path: str) -> str | None:
    """The Debian package that ships this path (usrmerge: /usr/bin/x may be shipped as /bin/x)."""
    candidates = [path]
    for merged in ("/usr/bin/", "/usr/sbin/"):
        if path.startswith(merged):
            candidates.append("/" + path[len("/usr/"):])
    for candidate in candidates:
        done = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return done.stdout.split(":")[0].strip()
    return None


def _essential(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Essential}", package], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() == "yes"


def origin(call: Call, allowed: set[str], prefix: Path) -> tuple[str | None, str]:
    """(where the program comes from, or None when from nothing the project installs; what was found)."""
    chosen = os.environ.get(call.env) if call.env and os.environ.get(call.env) else None
    found = shutil.which(chosen) if chosen else find_program(call.program)
    if found is None:
        return None, "not installed"
    path = Path(found).absolute()
    if prefix in path.parents:
        return "the lock", str(path)
    # The path itself, then each link it goes through: /usr/bin/g++ (g++) -> g++-12 (g++-12, its dependency).
    seen = []
    link = path
    for _ in range(8):
        owner = _owner(str(link))
        if owner:
            seen.append(owner)
            if owner in allowed or _essential(owner):
                return f"Debian's {owner}", str(path)
        if not link.is_symlink():
            break
        link = (link.parent / os.readlink(link)).absolute()
    return None, f"{path} ({'from ' + ', '.join(seen) if seen else 'from no Debian package'})"


def unprovided(calls: list[Call], allowed: set[str], prefix: Path) -> dict[str, str]:
    """program -> why nothing the project installs provides it, with where the code runs it."""
    where = defaultdict(list)
    for call in calls:
        where[call.program].append(call)
    problems = {}
    for program, sites in where.items():
        source, found = origin(sites[0], allowed, prefix)
        if source is None:
            places = ", ".join(c.where for c in sites[:3]) + (" ..." if len(sites) > 3 else "")
            problems[program] = f"{found}; run at {places}"
    return problems
