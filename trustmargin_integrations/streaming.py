"""Greedy text out of a local model, streamed: the prompt's token ids within the model's window
(:func:`prompt_ids`) and decoding until EOS or a stop string (:func:`stream_greedy`). The
LangChain models' plain turns decode here; schema-guided JSON (:mod:`.guided`) builds on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from trustmargin_integrations.errors import InvalidInputError


def prompt_ids(backend: Any, rendered: str, max_new_tokens: int, field: str
               ) -> tuple[list[int], int]:
    """The rendered prompt's token ids and the new-token budget that fits the model's window.

    A prompt that leaves no room to answer is refused before any model call (a prompt of
    tens of thousands of tokens would otherwise spend minutes in prefill and then fail).
    """
    ids = backend.encode_prompt(rendered)
    window = backend.context_window  # declared by the Backend protocol (None: unknown)
    if window is not None and len(ids) >= window:
        raise InvalidInputError(field, f"is {len(ids)} tokens, more than the model's "
                                f"{window}-token window", "shorten it: fewer or shorter "
                                "documents in the context, or a model with a longer window")
    room = max_new_tokens if window is None else min(max_new_tokens, window - len(ids))
    return ids, room


def stream_greedy(backend: Any, ids: list[int], max_new_tokens: int,
                  stop: Sequence[str] | None = None) -> Iterator[str]:
    """Greedy decoding of ``ids`` as text pieces, until EOS, a stop sequence (left out of the
    text) or ``max_new_tokens``: a chat answer runs on past its first line (the first-line
    stop belongs to the paper's candidates only).

    Drives the backend's public token-level decoding (``greedy_tokens``, which takes the
    model's lock per forward pass, never across a yield, so an abandoned or async stream
    never holds the model).
    """
    stops = [s for s in stop or [] if s]
    # Text that could still become a stop sequence is held back until it cannot.
    hold = max((len(s) for s in stops), default=1) - 1
    generated: list[int] = []
    sent, text = 0, ""
    for token in backend.greedy_tokens(ids, max_new_tokens):
        if token in backend.eos_token_ids:
            break
        generated.append(token)
        text = backend.decode_tokens(generated)
        cut = min((i for i in (text.find(s) for s in stops) if i != -1), default=-1)
        if cut != -1:
            yield text[sent:cut]
            return
        # An incomplete multi-byte character decodes as U+FFFD: wait for the next token.
        ready = len(text) - hold if not text.endswith("\ufffd") else sent
        if ready > sent:
            yield text[sent:ready]
            sent = ready
    if len(text) > sent:
        yield text[sent:]
