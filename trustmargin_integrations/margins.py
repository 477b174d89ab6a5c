"""Pure margin arithmetic of TrustMargin (Section 3 of the paper). No model, no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Margins:
    """The two margins and their combination for one question."""

    m_prior: float
    m_bind: float
    m: float


def compute_margins(
    direct_qonly: float,
    direct_qctx: float,
    direct_ctxonly: float,
    rag_qonly: float,
    rag_qctx: float,
    rag_ctxonly: float,
    lambda_bind: float,
) -> Margins:
    """Margins from six length-normalized log-likelihoods.

    ``M_prior = l_D(y_R) - l_D(y_D)``,
    ``M_bind = [l_R(y_R) - l_C(y_R)] - [l_R(y_D) - l_C(y_D)]``,
    ``M = M_prior + lambda_bind * M_bind``.
    """
    m_prior = rag_qonly - direct_qonly
    m_bind = (rag_qctx - rag_ctxonly) - (direct_qctx - direct_ctxonly)
    return Margins(m_prior=m_prior, m_bind=m_bind, m=m_prior + lambda_bind * m_bind)


def prefers_rag(m: float, tau: float) -> bool:
    """The sparse decision rule: trust retrieval only when ``M > tau`` (a tie keeps Direct)."""
    return m > tau
