"""Numerical drift of a cheaper dtype (e.g. bf16) against the fp32 reference, from a run.

The fp32 run's candidates are re-scored by a second arbiter (same model, other dtype) with the
candidates given, so only the likelihoods can differ: the report gives the absolute
log-likelihood differences and how many source decisions flip at the default rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.evaluation.runner import EvalRecord
from trustmargin_integrations.rule.replay import replay

_VIEWS = ("question_only", "question_context", "context_only")


@dataclass(frozen=True)
class DriftReport:
    """Likelihood and decision differences between a reference run and a re-scoring."""

    n_questions: int
    n_scored: int
    mean_abs_loglik_diff: float
    max_abs_loglik_diff: float
    mean_abs_margin_diff: float
    max_abs_margin_diff: float
    decisions_flipped: int
    seconds_per_question: float


def measure_drift(reference: Sequence[EvalRecord], other: TrustMargin) -> DriftReport:
    """Re-score ``reference``'s candidates with ``other`` and compare (needs the passages)."""
    import time

    inputs = [{"question": r.example.question, "passages": list(r.passages),
               "direct_answer": r.decision.direct_answer, "rag_answer": r.decision.rag_answer}
              for r in reference]
    start = time.perf_counter()
    fresh = other.arbitrate_batch(inputs)
    seconds = (time.perf_counter() - start) / max(len(inputs), 1)
    lik_diffs: list[float] = []
    margin_diffs: list[float] = []
    flips = 0
    scored = 0
    for ref, new in zip(reference, fresh, strict=True):
        old = ref.decision
        if replay(old) != replay(new):
            flips += 1
        if old.m is None or new.m is None:
            continue
        scored += 1
        for side in ("direct_likelihoods", "rag_likelihoods"):
            a, b = getattr(old, side), getattr(new, side)
            lik_diffs += [abs(getattr(a, v) - getattr(b, v)) for v in _VIEWS]
        margin_diffs.append(abs(old.m - new.m))
    return DriftReport(
        n_questions=len(reference), n_scored=scored,
        mean_abs_loglik_diff=mean(lik_diffs) if lik_diffs else 0.0,
        max_abs_loglik_diff=max(lik_diffs, default=0.0),
        mean_abs_margin_diff=mean(margin_diffs) if margin_diffs else 0.0,
        max_abs_margin_diff=max(margin_diffs, default=0.0),
        decisions_flipped=flips, seconds_per_question=seconds)
