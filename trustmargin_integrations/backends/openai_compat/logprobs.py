"""Reading an answer's log-likelihood out of an echoed completions response, checked.

The request is the prompt and the answer as one string, echoed with ``logprobs=1`` and
``max_tokens=1``. The answer's tokens are taken from the END of the echoed sequence (the
generated tokens, ``usage.completion_tokens``, dropped first), because servers differ at the
start: vLLM returns the BOS token with a ``null`` log-probability, llama-cpp-python drops a
leading BOS and also omits later tokens equal to BOS. The tail's token texts are checked
against the answer, and every number against the range a log-probability can have, so a
mismatched tokenizer or a broken server fails loudly instead of producing a decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trustmargin_integrations.errors import BackendError

LOGPROB_TOLERANCE = 1e-3
"""How far above 0 a token log-probability may be: servers in half precision round a
certain token's ``log 1 = 0`` to a tiny positive number; anything larger is impossible."""


def first_choice(data: Mapping[str, Any], url: str) -> dict[str, Any]:
    """``choices[0]`` of a completions response from the server at ``url``."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BackendError(f"{url}/v1/completions answered without choices. Fix: use "
                           "a server that implements the OpenAI completions API")
    return choices[0]


def echoed_answer_logprob(data: Mapping[str, Any], answer: str, n: int, url: str) -> float:
    """Sum of the answer's ``n`` log-probabilities in an echoed completion response."""
    logprobs = first_choice(data, url).get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list) or not values:
        raise BackendError(
            f"{url} returned no prompt log-probabilities for an echo request. Fix: "
            "serve with prompt-logprob support (llama-cpp-python: logits_all=true; vLLM: "
            "--max-logprobs 1 or more); the llama.cpp C++ server does not echo them"
        )
    usage = data.get("usage")
    generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(generated, bool) or not isinstance(generated, int) or generated < 0:
        generated = 1
    end = len(values) - generated
    start = end - n
    if start < 1:
        raise BackendError(f"{url} echoed {len(values)} log-probabilities, too few for "
                           f"a {n}-token answer after its prompt. Fix: enable echo with "
                           "prompt logprobs on the server")
    tail = values[start:end]
    if any(v is None for v in tail):
        raise BackendError(f"{url} returned null log-probabilities for prompt tokens. "
                           "Fix: enable prompt logprobs on the server")
    for i, value in enumerate(tail, start):
        _check_logprob(value, i, answer, url)
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if isinstance(tokens, list) and len(tokens) == len(values):
        seen = "".join(str(t) for t in tokens[start:end])
        if _fold(seen) != _fold(answer):
            raise BackendError(
                f"the server's last {n} prompt tokens read {seen!r}, not the answer "
                f"{answer!r}: the local tokenizer does not match the served model. Fix: "
                "pass the tokenizer of the model the server runs"
            )
    return float(sum(float(v) for v in tail))


def _check_logprob(value: Any, index: int, answer: str, url: str) -> None:
    """Refuse a token log-probability that is not a real number in (-inf, 0].

    A NaN would make every comparison with tau false, so it would silently become a
    Direct decision (and be cached as one); a positive or non-numeric value is as
    impossible. The error names the field of the answer and the request's answer.
    """
    problem = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problem = f"is a {type(value).__name__} ({str(value)[:40]!r}), not a number"
    elif math.isnan(value):
        problem = "is NaN"
    elif math.isinf(value):
        problem = f"is {value}"
    elif value > LOGPROB_TOLERANCE:
        problem = f"is {value!r}, above 0 (a log-probability is at most 0)"
    if problem is not None:
        shown = answer if len(answer) <= 60 else answer[:59] + "…"
        raise BackendError(
            f"{url}/v1/completions: choices[0].logprobs.token_logprobs[{index}] "
            f"{problem}, in the request scoring the answer {shown!r}; no decision was "
            "made from it. Fix: the server's numbers are broken (NaN and infinities "
            "usually mean a half-precision overflow or a damaged model file): serve the "
            "model in bfloat16 or float32, or fix the server, then run again")


def _fold(text: str) -> str:
    # Byte-level tokens that split a multi-byte character decode to nothing on some servers,
    # so the tail check compares ASCII characters only.
    return "".join(ch for ch in text if ch.isascii())
