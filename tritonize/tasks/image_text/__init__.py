"""Image-and-text embeddings (CLIP, SigLIP): task.py builds and verifies the repository; contract.py reads its
answers. task.py is imported only when a build asks for it."""

from .. import build_side
from .contract import CONTRACT, OUTPUT, Head

__all__ = ["CONTRACT", "OUTPUT", "Head", "TASK"]

__getattr__ = build_side(__name__, ("TASK",))
