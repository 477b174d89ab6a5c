"""The words and numbers the records and the rule share, at the bottom of the package.

The records (:mod:`~trustmargin_integrations.schema`) and the rule
(:mod:`~trustmargin_integrations.rule`) both speak of the side a decision keeps, why it was
kept, and the rule's two numbers (``tau``, ``lambda_bind``) within their bounds. Those words
live here, so that the records import neither the rule nor the config: a retriever that
returns ``Passage`` records loads no decision policy.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from trustmargin_integrations.errors import invalid_input

__all__ = ["LAMBDA_BIND_LIMIT", "TAU_LIMIT", "LambdaBind", "Reason", "Side", "Source", "Tau",
           "check_rule_value"]

Side = Literal["direct", "rag"]
"""One side of an arbitration: the closed-book answer (Direct) or the retrieval-augmented
one (RAG). A verdict keeps one side; the adapters serve and stream by side."""

Source = Literal["direct", "rag", "agree"]
"""Where a Decision's answer comes from (``Decision.source``): the side kept, or ``"agree"``
when the two sides' answers normalize equal (either text is the answer)."""

Reason = Literal[
    "margin_above_tau",
    "margin_at_or_below_tau",
    "answers_agree",
    "rag_answer_blank",
    "direct_answer_blank",
    "both_answers_blank",
    "no_evidence",
    "policy_always_rag",
    "policy_always_direct",
]
"""Why a decision came out as it did; the first two are a margin policy, the next five settle
a question before any likelihood is needed (:mod:`~trustmargin_integrations.rule.settled`),
and the last two name the single-source policy that decided a scored question. With several
RAG candidates, ``rag_answer_blank`` means every candidate is blank, ``both_answers_blank``
that Direct is blank too, and ``answers_agree`` that every non-blank candidate normalizes
equal to Direct."""

TAU_LIMIT: float = 100.0
"""``|tau|`` may be at most this. Margins are differences of per-token log-likelihoods, a few
nats in practice (the calibration grid spans -5..3); a threshold of 100 nats per token
already means "always Direct" (or, negative, "always RAG"), so anything beyond is a typo or
a damaged file (``1e308``), not a setting."""
LAMBDA_BIND_LIMIT: float = 100.0
"""``lambda_bind`` lies in ``[0, LAMBDA_BIND_LIMIT]``: a negative weight would reward an
answer for NOT being supported by the passages, the opposite of the binding margin's meaning
(the calibration grid spans 0..2)."""

# strict: True and "1.5" are refused, not read as 1.0 and 1.5; ints are accepted. Finite
# only: NaN would make every comparison with tau false (always Direct).
Tau = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-TAU_LIMIT, le=TAU_LIMIT,
                             description="Threshold: RAG is chosen iff M > tau.")]
LambdaBind = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0.0,
                                    le=LAMBDA_BIND_LIMIT,
                                    description="Weight of the evidence-binding margin.")]

RULE_VALUE_FIX = (f"pass a finite number: tau from -{TAU_LIMIT:g} to {TAU_LIMIT:g}, "
                  f"lambda_bind from 0 to {LAMBDA_BIND_LIMIT:g}")
"""How to fix a bad ``tau`` or ``lambda_bind`` (every error about them says it)."""
_RULE = {"tau": TypeAdapter(Tau), "lambda_bind": TypeAdapter(LambdaBind)}


def check_rule_value(name: str, value: Any) -> float:
    """``tau`` or ``lambda_bind`` checked against the bounds above (the one check for the
    config, the arbiter's per-call numbers and a replay's).

    Raises:
        InvalidInputError: not a finite number within the bounds (named ``name``).
    """
    try:
        return float(_RULE[name].validate_python(value))
    except ValidationError as exc:
        raise invalid_input(exc, RULE_VALUE_FIX, prefix=name) from None
