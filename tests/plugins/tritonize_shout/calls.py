from tritonize.tasks.calls import Infer

from .contract import OUTPUT


def shout(texts, loud: bool = True):
    """Each text's vector, doubled where loud."""
    vectors = (yield Infer([t.upper() if loud else t for t in texts], [OUTPUT]))[OUTPUT]
    return vectors * (2 if loud else 1)


CALLS = (shout,)
