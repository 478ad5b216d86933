"""What adding a task takes: a package and one registry line. A throwaway task, written here into a temporary
folder (an embedding's shape under a new name, with a route and a client call of its own), is registered and then
served by the API (its route answers, the OpenAPI document lists it and its body), read by the registry, and
called by both clients, with nothing else edited.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tritonize import tasks

PACKAGE = "throwaway_shout"
FILES = {
    "__init__.py": '"""A throwaway task: an embedding served under another name."""\n',
    "contract.py": '''
        from dataclasses import dataclass
        from typing import ClassVar

        from tritonize.tasks.embedding.contract import EmbeddingContract, Head as EmbeddingHead

        OUTPUT = "shout"


        @dataclass(frozen=True)
        class Head(EmbeddingHead):
            task: ClassVar[str] = "shout"


        class ShoutContract(EmbeddingContract):
            head_type = Head
            output_names = (OUTPUT,)

            def vectors(self, outputs):
                return outputs[OUTPUT]


        CONTRACT = ShoutContract()
    ''',
    "task.py": '''
        from tritonize.tasks.embedding.task import Embedding

        from .contract import CONTRACT


        class Shout(Embedding):
            contract = CONTRACT

            def detect(self, folder):
                return False


        TASK = Shout()
    ''',
    "calls.py": '''
        from tritonize.tasks.calls import Infer

        from .contract import OUTPUT


        def shout(texts, loud: bool = True):
            """Each text's vector, doubled where loud."""
            vectors = (yield Infer([t.upper() if loud else t for t in texts], [OUTPUT]))[OUTPUT]
            return vectors * (2 if loud else 1)


        CALLS = (shout,)
    ''',
    "api.py": '''
        from fastapi import Request

        from tritonize.api import schemas as s
        from tritonize.api.route_call import RouteCall
        from tritonize.api.routes.families import TRITONIZE, Router
        from tritonize.api.routes.responses import INFERS, answered, documented
        from tritonize.api.task_routes import TaskRoutes

        from .contract import CONTRACT

        router = Router(TRITONIZE)
        ROUTERS = (router,)
        ROUTES = TaskRoutes(CONTRACT, ("/v1/shout",), lambda a, name, text: {"model": name, "inputs": [text]})


        class ShoutRequest(s.Body):
            inputs: s.TextList
            model: str | None = None


        class ShoutResponse(s.Body):
            data: list[list[float]]


        @router.post("/v1/shout", responses=documented(s.OpenAIError, INFERS))
        @answered
        async def shout(body: ShoutRequest, request: Request) -> ShoutResponse:
            call = RouteCall.of(request, CONTRACT, body.model)
            answer = await call.infer([(t,) for t in call.texts(body.inputs, "inputs")])
            return ShoutResponse.model_construct(data=CONTRACT.vectors(answer))
    ''',
}


@pytest.fixture
def shout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The throwaway package on sys.path, and its one registry line; both undone afterwards."""
    folder = tmp_path / PACKAGE
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    before = len(tasks.NAMES)
    tasks.register(PACKAGE)  # the one line a new task adds to the registry
    yield before
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        monkeypatch.delitem(sys.modules, name)


def test_the_registry_reads_both_sides_of_a_new_task(shout) -> None:
    assert tasks.NAMES[-1] == "shout" and len(tasks.NAMES) == shout + 1
    assert tasks.contracts()["shout"].output_names == ("shout",)
    assert tasks.get("shout").name == "shout" and type(tasks.get("shout")).__name__ == "Shout"
    assert tasks.for_outputs(["shout"]).name == "shout"


def test_the_api_serves_a_new_task(shout, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from tritonize.api.app import create_app
    from tritonize.api.catalog import Catalog
    from tritonize.api.state import ApiSettings

    from tritonize.api.routes import routers

    app = create_app(ApiSettings(repository=tmp_path), Catalog(()))
    (route,) = [r for router in routers() for r in router.routes if r.path == "/v1/shout"]
    assert route.tags == ["tritonize"] and route.body_field.field_info.annotation.__name__ == "ShoutRequest"
    assert "/v1/shout" in app.endpoints  # answered straight from the guard, as every POST route
    # No shout model is served here: the document leaves its route out, and the route answers 424, in OpenAI's
    # envelope.
    assert "/v1/shout" not in app.app.openapi()["paths"]  # the guard wraps the FastAPI app
    with TestClient(app) as client:
        answer = client.post("/v1/shout", json={"inputs": ["hi"]})
    assert answer.status_code == 424 and "no shout model is served here" in answer.json()["error"]["message"]


def test_both_clients_call_a_new_task(shout) -> None:
    from tritonize.client import AsyncTextClient, TextClient
    from tritonize.tasks.calls import run

    blocking, asynchronous = TextClient(model="m"), AsyncTextClient(model="m")
    for client in (blocking, asynchronous):
        assert list(inspect.signature(client.shout).parameters) == ["texts", "loud"]
        assert client.shout.__doc__ == "Each text's vector, doubled where loud."
    assert inspect.iscoroutinefunction(asynchronous.shout) and not inspect.iscoroutinefunction(blocking.shout)
    asked = []

    def answer(infer):
        asked.append(infer)
        return {"shout": np.ones((len(infer.texts), 2), np.float32)}

    vectors = run(sys.modules[f"{PACKAGE}.calls"].shout(["a", "b"]), answer)
    assert asked[0].texts == ["A", "B"] and asked[0].outputs == ["shout"] and vectors.tolist() == [[2, 2], [2, 2]]


def test_a_misspelled_or_missing_declaration_fails_at_registration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task package whose api.py says SCORERS (meaning SCORER) or declares no ROUTERS is refused when it is
    registered, naming the module and the name; the registry is left as it was."""
    from tritonize.errors import TritonizeError

    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.syspath_prepend(str(tmp_path))
    for package, api in (("throwaway_typo", textwrap.dedent(FILES["api.py"]) + "\nSCORERS = None\n"),
                         ("throwaway_bare", "ROUTES = None\n")):
        folder = tmp_path / package
        folder.mkdir()
        for name, text in {**FILES, "api.py": api}.items():
            (folder / name).write_text(textwrap.dedent(text).lstrip())
    before = list(tasks.PACKAGES)
    with pytest.raises(TritonizeError, match=r"throwaway_typo\.api declares SCORERS, .*SCORER is meant"):
        tasks.register("throwaway_typo")
    with pytest.raises(TritonizeError, match=r"throwaway_bare\.api declares no ROUTERS"):
        tasks.register("throwaway_bare")
    with pytest.raises(TritonizeError, match="has no contract.py"):
        tasks.register("json")
    assert tasks.PACKAGES == before
    for name in [m for m in sys.modules if m.startswith(("throwaway_typo", "throwaway_bare"))]:
        monkeypatch.delitem(sys.modules, name)


def test_the_most_specific_claim_serves_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered task that claims sequence classifiers too: at classification's specificity the two claims are
    refused in one line naming both; more specific, it serves the folder; the other folders keep their tasks."""
    from support.model_zoo import build_sequence_classifier, build_token_classifier
    from tritonize.errors import TritonizeError
    from tritonize.folder import ModelFolder

    package = "throwaway_nli"
    folder = tmp_path / package
    folder.mkdir()
    task_py = textwrap.dedent('''
        from tritonize.tasks.embedding.task import Embedding

        from .contract import CONTRACT


        class Shout(Embedding):
            contract = CONTRACT
            specificity = 0

            def detect(self, folder):
                return folder.head_class == "ForSequenceClassification"


        TASK = Shout()
    ''').lstrip()
    for name, text in {**FILES, "task.py": task_py}.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    tasks.register(package)
    try:
        classifier = ModelFolder.read(build_sequence_classifier(tmp_path / "classifier", "bert"))
        with pytest.raises(TritonizeError, match=r"is claimed by classification, shout$"):
            tasks.detect(classifier)
        monkeypatch.setattr(sys.modules[f"{package}.task"].Shout, "specificity", 1)
        assert tasks.detect(classifier).name == "shout"
        tagger = ModelFolder.read(build_token_classifier(tmp_path / "tagger", "bert"))
        assert tasks.detect(tagger).name == "token-classification"
    finally:
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            monkeypatch.delitem(sys.modules, name)
