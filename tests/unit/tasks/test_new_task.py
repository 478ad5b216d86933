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

from tritonize import serving, tasks

PACKAGE = "throwaway_shout"
# The task package outside tritonize (tests/plugins/tritonize_shout), copied under another name for each test.
PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "tritonize_shout"
FILES = {str(p.relative_to(PLUGIN)): p.read_text() for p in sorted(PLUGIN.rglob("*.py"))}


def forget(*packages: str) -> None:
    """Drop the packages' modules (and their submodules) from sys.modules, for good: the next test that writes
    a package of the same name must import its own."""
    for name in [m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in packages)]:
        del sys.modules[name]


def write_package(root: Path, package: str, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / package / name).parent.mkdir(parents=True, exist_ok=True)
        (root / package / name).write_text(textwrap.dedent(text).lstrip())
    return root / package


@pytest.fixture
def shout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The throwaway package on sys.path, and its one registry line; both undone afterwards."""
    write_package(tmp_path, PACKAGE, FILES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    forget("tritonize.serving.shout", "tritonize.serving.shout_statistics")
    before = len(tasks.NAMES)
    tasks.register(PACKAGE)  # the one line a new task adds to the registry
    yield before
    forget(PACKAGE, "tritonize.serving.shout", "tritonize.serving.shout_statistics")


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
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    monkeypatch.syspath_prepend(str(tmp_path))
    for package, api in (("throwaway_typo", textwrap.dedent(FILES["api.py"]) + "\nSCORERS = None\n"),
                         ("throwaway_bare", "ROUTES = None\n")):
        write_package(tmp_path, package, {**FILES, "api.py": api})
    before, path = list(tasks.PACKAGES), list(serving.__path__)
    with pytest.raises(TritonizeError, match=r"throwaway_typo\.api declares SCORERS, .*SCORER is meant"):
        tasks.register("throwaway_typo")
    with pytest.raises(TritonizeError, match=r"throwaway_bare\.api declares no ROUTERS"):
        tasks.register("throwaway_bare")
    with pytest.raises(TritonizeError, match="has no contract.py"):
        tasks.register("json")
    assert tasks.PACKAGES == before and serving.__path__ == path
    forget("throwaway_typo", "throwaway_bare")


def test_a_misspelled_missing_or_unfinished_part_fails_as_the_task_is_made() -> None:
    """A task declares one part per concern (Detector, Tokens, Ensemble, Exporter, Verifier, Calibrator, Peer): a
    part under a name tritonize does not read, a required part left out, a part of the wrong kind, or one that
    leaves an abstract method undefined fails in one line naming it, never served half-declared."""
    from tritonize.errors import TritonizeError
    from tritonize.tasks.embedding.task import Embedding, EmbeddingExporter, EmbeddingVerifier
    from tritonize.tasks.task import PARTS, Exporter, Task

    assert set(PARTS) == {"detector", "tokens", "ensemble", "exporter", "verifier", "calibrator", "peer"}

    class Misspelled(Embedding):
        Verifyer = EmbeddingVerifier

    class Missing(Task):
        contract = Embedding.contract
        Detector, Ensemble = Embedding.Detector, Embedding.Ensemble

    class Unfinished(Exporter):
        pass

    class Abstract(Embedding):
        Exporter = Unfinished

    class WrongKind(Embedding):
        Ensemble = EmbeddingExporter

    for task, message in ((Misspelled, r"Misspelled declares the part Verifyer, which tritonize does not read"),
                          (Missing, r"Missing declares no Exporter"),
                          (Abstract, r"Abstract\.Exporter \(.*Unfinished\) does not define load"),
                          (WrongKind, r"WrongKind\.Ensemble is not a subclass of Ensemble")):
        with pytest.raises(TritonizeError, match=message):
            task()
    made = Embedding()
    assert all(part.task is made for part in (getattr(made, a) for a in PARTS))


def test_the_most_specific_claim_serves_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered task that claims sequence classifiers too: at classification's specificity the two claims are
    refused in one line naming both; more specific, it serves the folder; the other folders keep their tasks."""
    from support.model_zoo import build_sequence_classifier, build_token_classifier
    from tritonize.errors import TritonizeError
    from tritonize.folder import ModelFolder

    package = "throwaway_nli"
    task_py = textwrap.dedent('''
        from tritonize.tasks.embedding.task import Embedding, EmbeddingDetector

        from .contract import CONTRACT


        class ClaimsClassifiers(EmbeddingDetector):
            specificity = 0

            def detect(self, folder):
                return folder.head_class == "ForSequenceClassification"


        class Shout(Embedding):
            contract = CONTRACT
            Detector = ClaimsClassifiers


        TASK = Shout()
    ''').lstrip()
    write_package(tmp_path, package, {**FILES, "task.py": task_py})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    tasks.register(package)
    try:
        classifier = ModelFolder.read(build_sequence_classifier(tmp_path / "classifier", "bert"))
        with pytest.raises(TritonizeError, match=r"is claimed by classification, shout$"):
            tasks.detect(classifier)
        monkeypatch.setattr(sys.modules[f"{package}.task"].ClaimsClassifiers, "specificity", 1)
        assert tasks.detect(classifier).name == "shout"
        tagger = ModelFolder.read(build_token_classifier(tmp_path / "tagger", "bert"))
        assert tasks.detect(tagger).name == "token-classification"
    finally:
        forget(package, "tritonize.serving.shout", "tritonize.serving.shout_statistics")


def test_a_new_tasks_served_modules_come_from_its_own_package(shout, tmp_path: Path) -> None:
    """Its post step's module is its package's served/shout.py, imported as tritonize.serving.shout, and copied
    into the step's version folder with the shared modules it imports beside it."""
    import importlib

    from tritonize.serving import stub

    files = serving.step_files("shout", "model.py")
    assert files["model.py"] == tmp_path / PACKAGE / "served" / "shout.py"
    assert files["post_step.py"] == serving.SERVING_DIR / "post_step.py" and "stub.py" in files
    module = importlib.import_module("tritonize.serving.shout")
    assert module.__file__ == str(files["model.py"]) and issubclass(module.TritonPythonModel, stub.ServedStep)
    assert module.PostStep("x", 3)({"x": np.ones((1, 2), np.float32)})["shout"].tolist() == [[3.0, 3.0]]


def test_a_served_module_that_takes_a_shared_name_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version folder is flat: a task's served/texts.py would replace the shared texts.py in it. Registration
    refuses it, naming the file; the registry and the served path stay as they were."""
    from tritonize.errors import TritonizeError

    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    monkeypatch.syspath_prepend(str(tmp_path))
    write_package(tmp_path, "throwaway_clash", {**FILES, "served/texts.py": "X = 1\n"})
    before, path = list(tasks.PACKAGES), list(serving.__path__)
    with pytest.raises(TritonizeError, match=r"throwaway_clash: .*texts\.py is already a served module"):
        tasks.register("throwaway_clash")
    assert tasks.PACKAGES == before and serving.__path__ == path
    forget("throwaway_clash")


def test_an_installed_distribution_registers_its_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution that names the package under the tritonize.tasks entry point is registered without a line
    of tritonize's: its task is listed, its contract read and its served module found."""
    write_package(tmp_path, "throwaway_installed", FILES)
    info = tmp_path / "throwaway_installed-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: throwaway-installed\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{tasks.ENTRY_POINTS}]\nshout = throwaway_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    assert "shout" not in tasks.NAMES
    tasks.register_installed()
    assert tasks.PACKAGES[-1] == "throwaway_installed" and tasks.NAMES[-1] == "shout"
    assert tasks.contract_named("shout").output_names == ("shout",)
    assert serving.step_files("shout", "model.py")["model.py"] == tmp_path / "throwaway_installed" / "served" / "shout.py"
    forget("throwaway_installed", "tritonize.serving.shout", "tritonize.serving.shout_statistics")


@pytest.mark.parametrize("change, refusal", [
    ("class Other(ShoutDetector):\n    def read_head(self, folder, options):\n"
     "        return EMBEDDING_TASK.detector.read_head(folder, options)\n\n\nShout.Detector = Other\n",
     r"task shout read a embedding head \(Head\), not its own Head"),
    ("class Other(ShoutEnsemble):\n    def outputs(self, head):\n"
     "        return (TensorSpec('loud', 'TYPE_FP32', (head.dim,)),)\n\n\nShout.Ensemble = Other\n",
     r"task shout serves loud but its contract reads shout"),
])
def test_a_task_that_answers_as_another_is_refused_before_it_builds(change: str, refusal: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Built on another task, a task must still read its own head and serve the outputs its contract reads:
    otherwise the repository would be written as the other task's, or its readers would look for an answer
    the ensemble never returns."""
    from support.tiny_models import build_embedding_model
    from tritonize.errors import TritonizeError
    from tritonize.source import read_model
    from tritonize.spec.options import GenerateOptions

    package = "throwaway_other"
    write_package(tmp_path, package, {**FILES, "task.py": FILES["task.py"].replace("\n\nTASK = Shout()",
                                                                                    f"\n\n{change}\n\nTASK = Shout()")})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "PACKAGES", list(tasks.PACKAGES))
    monkeypatch.setattr(serving, "__path__", list(serving.__path__))
    tasks.register(package)
    try:
        source = build_embedding_model(tmp_path / "src")
        with pytest.raises(TritonizeError, match=refusal):
            read_model(GenerateOptions(model=str(source), task="shout", output=str(tmp_path / "repo")))
    finally:
        forget(package, "tritonize.serving.shout", "tritonize.serving.shout_statistics")
