"""Token F1 and exact match, as in the paper's evaluation (HotpotQA/2Wiki-style scoring), and
"gold stated" (:func:`contains_gold`) for answers written as chat or long-form text.

All three compare answers after :func:`~trustmargin_integrations.answers.normalize_answer`
(lowercase, punctuation and articles removed, whitespace squeezed). ``yes``/``no``/``noanswer``
are all-or-nothing: when either side normalizes to one of them and the two differ, F1 is 0
(token overlap between "no" and "no way" would otherwise earn partial credit). A gold answer
given as a list of aliases scores the maximum over aliases. Averages are reported x100.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from trustmargin_integrations.answers import normalize_answer
from trustmargin_integrations.errors import InvalidInputError

SPECIAL_ANSWERS = frozenset({"yes", "no", "noanswer"})


def _aliases(gold: str | Sequence[str]) -> list[str]:
    if isinstance(gold, str):
        aliases = [gold]
    elif isinstance(gold, (list, tuple)):
        aliases = list(gold)
    else:
        aliases = []
    if not aliases or not all(isinstance(a, str) for a in aliases):
        raise InvalidInputError("gold", "must be a string or a non-empty list of strings",
                                "give at least one gold answer alias")
    return aliases


def token_f1_single(prediction: str, gold: str) -> float:
    """Token-level F1 (0..1) of one prediction against one gold string."""
    pred_norm, gold_norm = normalize_answer(prediction), normalize_answer(gold)
    if (pred_norm in SPECIAL_ANSWERS or gold_norm in SPECIAL_ANSWERS) and pred_norm != gold_norm:
        return 0.0
    pred_tokens, gold_tokens = pred_norm.split(), gold_norm.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match_single(prediction: str, gold: str) -> float:
    """1.0 when both normalize to the same string, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str | Sequence[str]) -> float:
    """Token F1 (0..1), maximum over gold aliases."""
    return max(token_f1_single(prediction, g) for g in _aliases(gold))


def exact_match(prediction: str, gold: str | Sequence[str]) -> float:
    """Exact match (0 or 1), maximum over gold aliases."""
    return max(exact_match_single(prediction, g) for g in _aliases(gold))


def contains_gold(response: str, gold: str | Sequence[str]) -> float:
    """1.0 when a normalized gold alias occurs in the normalized response as whole tokens.

    The grade for long-form and chat answers: a whole text that states the gold answer
    among other words earns full credit, where its token F1 is diluted by the text's length
    and its exact match is 0.
    """
    padded = f" {normalize_answer(response)} "
    return float(any(f" {alias} " in padded
                     for alias in (normalize_answer(g) for g in _aliases(gold)) if alias))


def mean_x100(values: Sequence[float]) -> float:
    """Average of per-example scores, reported on the paper's 0-100 scale (0 for no examples)."""
    return 100.0 * sum(values) / len(values) if values else 0.0
