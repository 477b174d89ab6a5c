"""What the rule reads and says: margins as named records, the kept side and why.

Records of the rule only (no model, no policy): :class:`MarginPair` is one RAG candidate's
evidence against Direct, :class:`Margins` the same with the combined ``M`` a policy computed,
and :class:`Verdict` what a policy (or a settled case) decided. The words it shares with the
Decision records, ``Side`` and ``Reason``, are defined (only) in
:mod:`~trustmargin_integrations.vocabulary`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trustmargin_integrations.vocabulary import Reason, Side

PAPER_LAMBDA_BIND: float = 0.5
"""The paper's weight of the evidence-binding margin (Section 4.3): the one place it is typed."""
PAPER_TAU: float = -1.5
"""The paper's decision threshold (Section 4.3): RAG is chosen iff M > tau."""

__all__ = ["PAPER_LAMBDA_BIND", "PAPER_TAU", "HasMargins", "MarginPair", "Margins", "ThreeViews",
           "Verdict", "compute_margins"]


class ThreeViews(Protocol):
    """One answer's length-normalized log-likelihoods under the three prompt views."""

    question_only: float
    question_context: float
    context_only: float


class HasMargins(Protocol):
    """Anything carrying one candidate's two margins (a :class:`MarginPair`, :class:`Margins`
    or a recorded candidate)."""

    @property
    def m_prior(self) -> float: ...

    @property
    def m_bind(self) -> float: ...


@dataclass(frozen=True)
class MarginPair:
    """One RAG candidate's evidence against Direct: ``M_prior`` and ``M_bind``."""

    m_prior: float
    m_bind: float


@dataclass(frozen=True)
class Margins(MarginPair):
    """The two margins and ``M``, their combination under the policy that decided."""

    m: float


@dataclass(frozen=True)
class Verdict:
    """What the rule decided: the kept side, why, and the margins when scored.

    ``candidate`` is the index of the RAG candidate the verdict is about: the kept one when
    ``choice`` is ``"rag"``; the best-margin one (whose ``margins`` these are) when a scored
    verdict keeps Direct; None when a settled verdict keeps Direct.
    """

    choice: Side
    reason: Reason
    margins: Margins | None = None
    candidate: int | None = None

    @property
    def kept(self) -> int | None:
        """The kept RAG candidate's index; None when Direct is kept."""
        return self.candidate if self.choice == "rag" else None


def compute_margins(direct: ThreeViews, rag: ThreeViews, lambda_bind: float) -> Margins:
    """Margins from the two answers' likelihoods under the three views.

    ``M_prior = l_D(y_R) - l_D(y_D)``,
    ``M_bind = [l_R(y_R) - l_C(y_R)] - [l_R(y_D) - l_C(y_D)]``,
    ``M = M_prior + lambda_bind * M_bind`` (the paper's rule at ``lambda_bind``).
    """
    m_prior = rag.question_only - direct.question_only
    m_bind = (rag.question_context - rag.context_only) - (
        direct.question_context - direct.context_only
    )
    return Margins(m_prior=m_prior, m_bind=m_bind, m=m_prior + lambda_bind * m_bind)
