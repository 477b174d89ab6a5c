"""Reading an answer's log-likelihood out of an echoed completions response, verified.

The answer's tokens are taken from the END of the echoed prompt + answer (generated tokens
dropped first). Every assumption is checked (tokens present and aligned, the echo begins
with the prompt sent, ``usage.prompt_tokens`` within :data:`SPECIAL_TOKEN_SLACK`, the tail
spells the answer, every number within ``[LOGPROB_FLOOR, LOGPROB_TOLERANCE]``); anything else
is a :class:`~trustmargin_integrations.errors.BackendError`, never a decision. Why from the end:
docs/decisions.md, "Likelihoods from a server".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trustmargin_integrations.errors import BackendError

LOGPROB_TOLERANCE = 1e-3
"""How far above 0 a token log-probability may be: servers in half precision round a
certain token's ``log 1 = 0`` to a tiny positive number; anything larger is impossible."""

LOGPROB_FLOOR = -1e6
"""The lowest token log-probability accepted. No model gives a token a probability below
``e**-1e6`` (logits would have to be a million apart); a server that sends ``-1e308`` is
broken, and such values would overflow the sum (``-inf``) or the margins."""

SPECIAL_TOKEN_SLACK = 2
"""How far ``usage.prompt_tokens`` may differ from the local count of the sent text: a
BOS (or EOS) that one side adds and the other does not. Cutting or rewriting a context
moves the count by far more, and changes the echoed text besides."""

_REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class EchoRequest:
    """What was sent for one echoed likelihood, as the checks need it.

    Attributes:
        sent: the prompt and the answer, the one string sent.
        answer: the answer (the end of ``sent``).
        pieces: the answer's tokens, each decoded on its own by the local tokenizer
            (a character split across tokens shows as U+FFFD there).
        sent_tokens: the local token count of ``sent``, counted as the server counts it.
    """

    sent: str
    answer: str
    pieces: tuple[str, ...]
    sent_tokens: int


def first_choice(data: Mapping[str, Any], url: str) -> dict[str, Any]:
    """``choices[0]`` of a completions response from the server at ``url``."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BackendError(f"{url}/v1/completions answered without choices. Fix: use "
                           "a server that implements the OpenAI completions API")
    return choices[0]


def completion_text(data: Mapping[str, Any], url: str) -> str:
    """``choices[0].text``: a string (a missing or null text is an empty generation)."""
    text = first_choice(data, url).get("text")
    if text is None:
        return ""
    if not isinstance(text, str):
        raise BackendError(f"{url}/v1/completions: choices[0].text is a "
                           f"{type(text).__name__} ({str(text)[:40]!r}), not text. Fix: use "
                           "a server that implements the OpenAI completions API")
    return text


def echoed_answer_logprob(data: Mapping[str, Any], request: EchoRequest, url: str) -> float:
    """Sum of the answer's log-probabilities in an echoed completion response, verified."""
    answer, n = request.answer, len(request.pieces)
    choice = first_choice(data, url)
    logprobs = choice.get("logprobs")
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
    assert isinstance(logprobs, dict)  # values came from it
    tokens = _tokens(logprobs.get("tokens"), len(values), url)
    _check_echo(choice.get("text"), request.sent, url)
    _check_prompt_tokens(usage, request.sent_tokens, url)
    seen = "".join(tokens[start:end])
    if not _spells(seen, answer, request.pieces):
        raise BackendError(
            f"the server's last {n} prompt tokens read {seen!r}, not the answer "
            f"{answer!r}: the local tokenizer does not match the served model. Fix: "
            "pass the tokenizer of the model the server runs"
        )
    tail = values[start:end]
    if any(v is None for v in tail):
        raise BackendError(f"{url} returned null log-probabilities for prompt tokens. "
                           "Fix: enable prompt logprobs on the server")
    for i, value in enumerate(tail, start):
        _check_logprob(value, i, answer, url)
    return float(sum(float(v) for v in tail))


def _tokens(tokens: Any, count: int, url: str) -> list[str]:
    """``logprobs.tokens``: one string per log-probability, or the alignment is unverifiable."""
    where = f"{url}/v1/completions: choices[0].logprobs.tokens"
    fix = ("Fix: use a server that returns the echoed token texts with their "
           "log-probabilities (vLLM, llama-cpp-python)")
    if not isinstance(tokens, list):
        raise BackendError(f"{where} is missing, so the answer's place in the echo cannot be "
                           f"checked. {fix}")
    if len(tokens) != count:
        raise BackendError(f"{where} has {len(tokens)} entries for {count} "
                           f"log-probabilities, so the numbers cannot be matched to tokens. "
                           f"{fix}")
    odd = next((i for i, t in enumerate(tokens) if not isinstance(t, str)), None)
    if odd is not None:
        raise BackendError(f"{where}[{odd}] is a {type(tokens[odd]).__name__}, not text. "
                           f"{fix}")
    return tokens


def _check_echo(text: Any, sent: str, url: str) -> None:
    """The echoed text must begin with the very string sent (then the one generated token)."""
    if isinstance(text, str) and text.startswith(sent):
        return
    if not isinstance(text, str):
        problem = f"echoed no text (choices[0].text is a {type(text).__name__})"
    else:
        at = next((i for i, (a, b) in enumerate(zip(text, sent, strict=False)) if a != b),
                  min(len(text), len(sent)))
        problem = (f"echoed a prompt other than the one sent: from character {at} of "
                   f"{len(sent)} it reads {text[at:at + 40]!r} where {sent[at:at + 40]!r} "
                   "was sent")
    raise BackendError(f"{url}/v1/completions {problem}; the likelihoods would be of "
                       "another text. Fix: make the server score the prompt as sent (no "
                       "prompt truncation such as vLLM's truncate_prompt_tokens, a context "
                       "window that holds it, no prompt rewriting proxy)")


def _check_prompt_tokens(usage: Any, expected: int, url: str) -> None:
    """``usage.prompt_tokens``, where reported, must be the sent text's token count."""
    reported = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if reported is None:
        return
    where = f"{url}/v1/completions: usage.prompt_tokens"
    if isinstance(reported, bool) or not isinstance(reported, int) or reported < 0:
        raise BackendError(f"{where} is {str(reported)[:40]!r}, not a token count. Fix: use "
                           "a server that implements the OpenAI completions API")
    if abs(reported - expected) > SPECIAL_TOKEN_SLACK:
        raise BackendError(
            f"{where} is {reported}, but the text sent is {expected} tokens long: the server "
            "scored another text (a truncated or rewritten prompt) or runs another "
            "tokenizer. Fix: serve the model whose tokenizer you pass, with a context window "
            "that holds the whole prompt and no prompt truncation")


def _spells(seen: str, answer: str, pieces: Sequence[str]) -> bool:
    """True when the server's tail text ``seen`` is the answer, every character compared.

    A character whose bytes are split across tokens has no text of its own in any one of
    them: servers print U+FFFD or nothing for its parts. So ``seen`` without U+FFFD must be
    the answer itself, or the local tokens' texts with their split characters (U+FFFD in
    ``pieces``) left out; whitespace is not compared in that second form, where the local
    tokenizer's one-token decoding may drop a word's leading space (SentencePiece).
    """
    shown = seen.replace(_REPLACEMENT, "")
    if shown == answer.replace(_REPLACEMENT, ""):
        return True
    local = "".join(pieces)
    if _REPLACEMENT not in local:
        return False  # nothing split: only the exact form is right
    return "".join(shown.split()) == "".join(local.replace(_REPLACEMENT, "").split())


def _check_logprob(value: Any, index: int, answer: str, url: str) -> None:
    """Refuse a token log-probability that is not a real number in [floor, tolerance].

    A NaN would make every comparison with tau false, so it would silently become a
    Direct decision (and be cached as one); a positive or non-numeric value is as
    impossible, and one below the floor would overflow the sum or a margin. The error names
    the field of the answer and the request's answer.
    """
    problem = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problem = f"is a {type(value).__name__} ({str(value)[:40]!r}), not a number"
    elif isinstance(value, int) and not LOGPROB_FLOOR <= value <= 0:
        # Compared as an integer: one of 400 digits does not convert to a float.
        problem = f"is the integer {str(value)[:40]}{'…' if len(str(value)) > 40 else ''}"
    elif math.isnan(value):
        problem = "is NaN"
    elif math.isinf(value):
        problem = f"is {value}"
    elif value > LOGPROB_TOLERANCE:
        problem = f"is {value!r}, above 0 (a log-probability is at most 0)"
    elif value < LOGPROB_FLOOR:
        problem = (f"is {value!r}, below {LOGPROB_FLOOR:g} (no model gives a token so small "
                   "a probability; the sum would overflow)")
    if problem is not None:
        shown = answer if len(answer) <= 60 else answer[:59] + "…"
        raise BackendError(
            f"{url}/v1/completions: choices[0].logprobs.token_logprobs[{index}] "
            f"{problem}, in the request scoring the answer {shown!r}; no decision was "
            "made from it. Fix: the server's numbers are broken (NaN and infinities "
            "usually mean a half-precision overflow or a damaged model file): serve the "
            "model in bfloat16 or float32, or fix the server, then run again")
