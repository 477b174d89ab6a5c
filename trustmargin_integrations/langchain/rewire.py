"""A user's LCEL chain with one part swapped: find a part (the retriever, the prompt) and
rebuild the containers around it, leaving every other step the very object the user built.

LCEL has no public API for this; the containers are pydantic models whose children are plain
fields, so each one is copied with ``model_copy(update=...)`` (sequences, parallel maps,
``.assign``, bindings such as ``with_config``/``bind``, fallbacks, branches, ``RunnableEach``).
Other runnables are leaves: a part inside a ``RunnableLambda``'s function cannot be reached.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

from langchain_core.runnables import (
    Runnable,
    RunnableBranch,
    RunnableLambda,
    RunnableParallel,
    RunnableSequence,
)
from langchain_core.runnables.base import RunnableBindingBase, RunnableEachBase
from langchain_core.runnables.fallbacks import RunnableWithFallbacks
from langchain_core.runnables.passthrough import RunnableAssign


def children(runnable: Runnable[Any, Any]) -> list[Runnable[Any, Any]]:
    """The runnables a container runs, in the order it runs them."""
    if isinstance(runnable, RunnableSequence):
        return list(runnable.steps)
    if isinstance(runnable, RunnableParallel):
        return list(runnable.steps__.values())
    if isinstance(runnable, RunnableAssign):
        return [runnable.mapper]
    if isinstance(runnable, RunnableBindingBase | RunnableEachBase):
        return [runnable.bound]
    if isinstance(runnable, RunnableWithFallbacks):
        return [runnable.runnable, *runnable.fallbacks]
    if isinstance(runnable, RunnableBranch):
        return [*(part for pair in runnable.branches for part in pair), runnable.default]
    return []


def walk(runnable: Runnable[Any, Any]) -> Iterator[Runnable[Any, Any]]:
    """Every runnable of the graph, depth first, in the order they run."""
    yield runnable
    for child in children(runnable):
        yield from walk(child)


def find(runnable: Runnable[Any, Any], match: Callable[[Runnable[Any, Any]], bool]
         ) -> Runnable[Any, Any] | None:
    """The first part that ``match`` accepts (None: there is none)."""
    return next((part for part in walk(runnable) if match(part)), None)


def replace(runnable: Runnable[Any, Any], target: Runnable[Any, Any],
            new: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """``runnable`` with every occurrence of ``target`` (the object itself) replaced by
    ``new``; containers without it are returned as they are."""
    if runnable is target:
        return new

    def swap(part: Runnable[Any, Any]) -> Runnable[Any, Any]:
        return replace(part, target, new)

    if not any(part is target for part in walk(runnable)):
        return runnable
    if isinstance(runnable, RunnableSequence):
        steps = [swap(s) for s in runnable.steps]
        return runnable.model_copy(update={"first": steps[0], "middle": steps[1:-1],
                                           "last": steps[-1]})
    if isinstance(runnable, RunnableParallel):
        return runnable.model_copy(update={"steps__": {k: swap(v) for k, v in
                                                       runnable.steps__.items()}})
    if isinstance(runnable, RunnableAssign):
        return runnable.model_copy(update={"mapper": swap(runnable.mapper)})
    if isinstance(runnable, RunnableBindingBase | RunnableEachBase):
        return runnable.model_copy(update={"bound": swap(runnable.bound)})
    if isinstance(runnable, RunnableWithFallbacks):
        return runnable.model_copy(update={"runnable": swap(runnable.runnable),
                                           "fallbacks": [swap(f) for f in runnable.fallbacks]})
    if isinstance(runnable, RunnableBranch):
        return runnable.model_copy(update={
            "branches": [(swap(c), swap(r)) for c, r in runnable.branches],
            "default": swap(runnable.default)})
    return runnable


def item_key(runnable: Runnable[Any, Any]) -> str | None:
    """The key an ``itemgetter("key")`` step reads (None for any other step)."""
    func = getattr(runnable, "func", None)
    if isinstance(runnable, RunnableLambda) and isinstance(func, operator.itemgetter):
        args = func.__reduce__()[1]
        return args[0] if len(args) == 1 and isinstance(args[0], str) else None
    return None


def key_before(runnable: Runnable[Any, Any], target: Runnable[Any, Any]) -> str | None:
    """The input key read by an ``itemgetter`` step right before ``target`` in a sequence
    (``itemgetter("question") | retriever``); None when there is no such step."""
    for part in walk(runnable):
        if isinstance(part, RunnableSequence):
            for before, after in pairwise(part.steps):
                if after is target:
                    return item_key(before)
    return None
