"""A check every Python step makes as it loads: do tensors cross this Python-backend stub intact? And
`ServedStep`, the part of Triton's side every served step shares, which makes it first.

The r24.10 stubs (the nvidia-pytriton wheel's Triton 2.51) are built with pybind11 2.10, which reads a numpy
array's element size through numpy 1's struct layout. Under numpy 2 it reads the wrong field: every element of
a tensor the stub builds from a buffer becomes a copy of its first byte. A BYTES input then loses its length
prefixes (the first request aborts the stub: "unpack_from requires a buffer of at least 741092400 bytes"), and
a numeric input arrives silently wrong ([1.5, 2.5] as [1.5, 1.5]). Fixed upstream in python_backend#384
(pybind11 2.12, release 24.11). The stub takes numpy from the first `python3` on PATH (pybind11 2.10 starts
Python 3.11+ isolated, so PYTHONPATH is ignored), which is how a GPU host's system numpy 2 reached it.

The check builds a tensor through the same constructor as a request's inputs (`Tensor.from_dlpack`) and
refuses to load, in one line, when it comes back changed: the model is then unavailable and the server log
says why, instead of a stub that dies on its first request or answers wrong.
"""

from __future__ import annotations

import json
import os

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests pass a stand-in module
    pb_utils = None

PROBE = (1, 2, 3, 4)


def check_tensor_exchange(utils=None) -> None:
    """Raise at load when a tensor does not cross this stub intact (see the module's docstring)."""
    utils = utils or pb_utils
    sent = np.array(PROBE, dtype=np.int32)
    back = utils.Tensor.from_dlpack("probe", utils.Tensor("probe", sent).to_dlpack()).as_numpy()
    if tuple(np.asarray(back).tolist()) != PROBE:
        raise RuntimeError(
            f"this Triton Python-backend stub corrupts tensors with numpy {np.__version__} ({np.__file__}): "
            f"{list(PROBE)} came back as {np.asarray(back).tolist()}. The stub takes numpy from the first python3 on "
            "PATH; give it numpy<2 there (a virtualenv's bin/ first on PATH), or serve with Triton 24.11 or later "
            "(python_backend#384)")


class ServedStep:
    """Triton's side of a served step, the part every one shares: each module's TritonPythonModel subclasses it
    and sets itself up in `load`, from the configuration and the version folder Triton hands over, once the stub
    is known to pass tensors intact."""

    def initialize(self, args):
        check_tensor_exchange()  # refuse to load on a stub that would corrupt tensors
        self.load(json.loads(args["model_config"]), os.path.join(args["model_repository"], args["model_version"]),
                  args)

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        raise NotImplementedError
