"""The load-time check that tensors cross the Python-backend stub intact (serving/stub.py). The real stub runs in
every e2e test (each step makes the check as it loads); here, the check's verdict on a stub that keeps a tensor
and on one that does what pybind11 2.10 does under numpy 2 (every element a copy of the first byte)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from tritonize.serving import stub


def stand_in(defect: bool) -> types.SimpleNamespace:
    """pb_utils' Tensor as far as the check uses it: to_dlpack, from_dlpack, as_numpy."""

    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, np.asarray(array)

        def to_dlpack(self):
            return self.array

        @classmethod
        def from_dlpack(cls, name, capsule):
            array = np.asarray(capsule)
            if defect:  # element size read as 1: each element built from the buffer's first byte
                array = np.full_like(array, array.view(np.uint8)[0])
            return cls(name, array)

        def as_numpy(self):
            return self.array

    return types.SimpleNamespace(Tensor=Tensor)


def test_a_stub_that_keeps_tensors_loads() -> None:
    stub.check_tensor_exchange(stand_in(defect=False))


def test_a_stub_that_corrupts_tensors_refuses_to_load_in_one_line_that_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match=r"\[1, 2, 3, 4\] came back as \[1, 1, 1, 1\]") as info:
        stub.check_tensor_exchange(stand_in(defect=True))
    message = str(info.value)
    assert "\n" not in message and "numpy<2" in message and "24.11" in message and np.__version__ in message


def test_every_python_step_makes_the_check_as_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each served module's TritonPythonModel is a ServedStep that leaves initialize() to it, and that one makes
    the check before it reads anything: on a corrupting stub it refuses with no arguments read."""
    import importlib

    from tritonize.serving import served_modules

    steps = []
    for path in served_modules().values():
        served = importlib.import_module(f"tritonize.serving.{path.stem}")
        model = getattr(served, "TritonPythonModel", None)
        if model is None:
            continue
        assert issubclass(model, stub.ServedStep) and "initialize" not in vars(model), path.name
        steps.append(path.name)
    assert len(steps) >= 8, steps
    monkeypatch.setattr(stub, "pb_utils", stand_in(defect=True))
    loaded = []

    class Step(stub.ServedStep):
        def load(self, config, version_dir, args):
            loaded.append(config)

    with pytest.raises(RuntimeError, match="came back as"):
        Step().initialize({})  # no model_config: reading it would be a KeyError
    monkeypatch.setattr(stub, "pb_utils", stand_in(defect=False))
    Step().initialize({"model_config": '{"name": "x"}', "model_repository": "/r", "model_version": "2"})
    assert loaded == [{"name": "x"}]
