"""Which model answered and which one scores: a warning, once, when they differ.

TrustMargin's margins are likelihoods of the *scorer* model. When a chain answers with
another model (a hosted chat model, a larger local one), the scorer judges answers it did not
write, and its margins are a proxy for that model's confidence. The adapters (the LangChain
drop-in, the LlamaIndex query engine, ``trustmargin check --chain``) say so once per pair of
models, naming both.
"""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("trustmargin_integrations")

_WARNED: set[tuple[str, str]] = set()
_LOCK = threading.Lock()


def _short(name: str) -> str:
    """A model name without its organisation and case (``HuggingFaceTB/SmolLM2-135M`` and
    ``smollm2-135m`` name the same model)."""
    return name.strip().rsplit("/", 1)[-1].lower()


def other_model_warning(answering: str | None, scorer: str) -> str | None:
    """The warning when ``answering`` (the chain's model name; None: not known) is not the
    scorer model ``scorer``; None when they are the same model."""
    if answering is not None and _short(answering) == _short(scorer):
        return None
    who = (f"answers with {answering!r}" if answering is not None
           else "answers with a model whose name it does not report")
    return (f"the chain {who}, but TrustMargin scores with {scorer!r}: the margins are the "
            f"scorer's likelihoods of another model's answers (a proxy for that model's "
            f"confidence); check the policy on your labeled questions with "
            f"`trustmargin check --chain`")


def warn_other_model(answering: str | None, scorer: str) -> str | None:
    """Log :func:`other_model_warning` once per pair of models in this process; return it
    (also when it was logged before), or None when the models are the same."""
    message = other_model_warning(answering, scorer)
    if message is None:
        return None
    pair = (answering or "", scorer)
    with _LOCK:
        first = pair not in _WARNED
        _WARNED.add(pair)
    if first:
        logger.warning(message)
    return message
