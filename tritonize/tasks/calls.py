"""A task's client calls, written once for the blocking and the asyncio client (tritonize/client.py).

A call is a generator function in the task's calls.py, listed in its CALLS: it builds the requests its answer
needs and yields them (an `Infer`, a `Parameter`, or a tuple of them, sent together), receives what the server
returned, and returns the answer. It does no I/O itself, so one function serves both clients: `TextClient` sends
what a call yields one after another, `AsyncTextClient` sends a tuple's requests concurrently.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from ..errors import TritonizeError

Text = Union[str, bytes]
Texts = Union[Iterable[Text], Mapping[str, Iterable[Text]]]


@dataclass(frozen=True)
class Infer:
    """One inference: the texts for the model's text input, or input name -> texts; the outputs asked for (None:
    all); top_k > 0: the outputs as Triton classification strings."""

    texts: Texts
    outputs: Sequence[str] | None = None
    top_k: int = 0


@dataclass(frozen=True)
class Parameter:
    """A string parameter of the ensemble's configuration; `missing` (with {model}) is the error where the model
    declares none."""

    name: str
    missing: str


Ask = Union[Infer, Parameter, tuple]
Call = Callable[..., Generator[Ask, Any, Any]]


def with_prompt(texts: Iterable[Text], prompt: str) -> list[Text]:
    """Each text behind the prompt (a query or passage instruction), as sentence-transformers prepends it."""
    if not prompt:
        return list(texts)
    return [prompt.encode("utf-8") + t if isinstance(t, bytes) else prompt + t for t in texts]


def run(call: Generator[Ask, Any, Any], answer: Callable[[Ask], Any]) -> Any:
    """Drive a call: each thing it asks answered (a tuple's items one after another, by `answer`), until it returns."""
    try:
        asked = next(call)
        while True:
            asked = call.send(tuple(answer(a) for a in asked) if isinstance(asked, tuple) else answer(asked))
    except StopIteration as done:
        return done.value


async def run_async(call: Generator[Ask, Any, Any], answer: Callable[[Ask], Awaitable[Any]]) -> Any:
    """Drive a call as `run` does, a tuple's items in flight together."""
    try:
        asked = next(call)
        while True:
            got = tuple(await asyncio.gather(*map(answer, asked))) if isinstance(asked, tuple) else await answer(asked)
            asked = call.send(got)
    except StopIteration as done:
        return done.value


def declared(asked: Parameter, model: str, value: str | None) -> str:
    """A configuration parameter a call needs; a model that declares none is refused in one line."""
    if not value:
        raise TritonizeError(asked.missing.format(model=model))
    return value


def method(call: Call, owner: str, asynchronous: bool) -> Callable[..., Any]:
    """A call as a client's method (the client's `_answer` sends what it asks): its own name, parameters and
    docstring."""
    if asynchronous:
        async def bound(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await run_async(call(*args, **kwargs), self._answer)
    else:
        def bound(self: Any, *args: Any, **kwargs: Any) -> Any:
            return run(call(*args, **kwargs), self._answer)
    signature = inspect.signature(call)
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *signature.parameters.values()]
    bound.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    bound.__name__, bound.__qualname__, bound.__doc__ = call.__name__, f"{owner}.{call.__name__}", call.__doc__
    bound.task_call = call  # type: ignore[attr-defined]
    return bound
