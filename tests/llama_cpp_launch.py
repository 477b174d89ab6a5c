"""Run ``llama_cpp.server`` (same arguments) with its top-log-probability sort done by numpy.

For each echoed prompt token, llama-cpp-python's completion sorts ``zip(logprobs, range(V))``
over the whole vocabulary in Python (V = 49,152 for SmolLM2: about 50 ms of CPU a token, as
much as the model's forward pass), only to keep the first ``logprobs`` entries. The tests'
cost is echoed tokens times requests, so this launcher puts :func:`sorted_like_builtin` in
place of ``sorted`` inside ``llama_cpp.llama``: the same list, element for element (value
descending, then index descending, as Python orders the tuples; the values as Python floats,
which compare and serialize as the array's own), from one numpy sort.
Anything else (another module, another argument shape) goes to the builtin. The server is
otherwise llama-cpp-python's own, answering the same bytes (tests/test_openai_compat.py checks
the two sorts agree). Not part of the library: production servers run as their users start them.

Usage: ``python tests/llama_cpp_launch.py --model model.gguf ...`` (``llama_cpp.server``'s options).
"""

from __future__ import annotations

import builtins
import runpy
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np


def _array_and_range(iterable: object) -> np.ndarray | None:
    """The 1-D float array of ``zip(array, range(len(array)))``, untouched; else ``None``.

    A zip, its sequence iterator and a range iterator say what they iterate through their
    pickling support (``__reduce__``) without advancing; anything else returns ``None``."""
    if type(iterable) is not zip:
        return None
    parts = iterable.__reduce__()[1]
    if len(parts) != 2:
        return None
    first, second = (part.__reduce__() for part in parts)
    # An iterator over a sequence (or a range) reduces to (iter, (sequence,), position);
    # both must not have started.
    if any(len(part) != 3 or part[0] is not iter or part[2] != 0 for part in (first, second)):
        return None
    values, ranged = first[1][0], second[1][0]
    if (not isinstance(values, np.ndarray) or values.ndim != 1
            or not np.issubdtype(values.dtype, np.floating) or np.isnan(values).any()
            or ranged != range(len(values))):
        return None
    return values


def sorted_like_builtin(iterable: Iterable[Any], /, *, key: Callable[[Any], Any] | None = None,
                        reverse: bool = False) -> list[Any]:
    """``sorted``, with ``sorted(zip(array, range(len(array))), reverse=True)`` done by numpy.

    The tuples are distinct (their indices are), so their order is total: value descending,
    then index descending. NaN, which Python's tuple comparison orders inconsistently, goes to the
    builtin."""
    values = _array_and_range(iterable) if key is None and reverse else None
    if values is None:
        return builtins.sorted(iterable, key=key, reverse=reverse)
    # A stable ascending sort of the negated, reversed values: value descending, and among
    # equal values the later index first.
    order = len(values) - 1 - np.argsort(-values[::-1], kind="stable")
    # Python floats equal to the array's values (the server writes them out as floats).
    return list(zip(values[order].tolist(), order.tolist(), strict=True))


def main() -> None:
    """Patch ``llama_cpp.llama``'s ``sorted`` and run ``llama_cpp.server`` as ``-m`` would."""
    import llama_cpp.llama

    llama_cpp.llama.sorted = sorted_like_builtin  # type: ignore[attr-defined]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
