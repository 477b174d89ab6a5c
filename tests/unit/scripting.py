"""Scripts shared by the unit tests: one question, its passage, and a backend whose six
likelihoods (three views x two answers) are given, so every margin is known by hand."""

from __future__ import annotations

from dataclasses import dataclass

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.testing import ScriptedBackend

QUESTION = "Which engineer designed the Velmora Bridge?"
PASSAGE = "The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."
DIRECT = "Anna Berg"
RAG = "Tomas Rilke"


@dataclass(frozen=True)
class Views:
    """One answer's per-token log-likelihoods under the paper's three views."""

    question_only: float
    question_context: float
    context_only: float


def six(direct: Views, rag: Views, *, direct_text: str = DIRECT, rag_text: str = RAG,
        **kwargs: object) -> ScriptedBackend:
    """A backend that generates ``direct_text`` closed-book and ``rag_text`` with the
    passages, and scores them as ``direct`` and ``rag`` say."""
    logprobs = {}
    for text, views in ((direct_text, direct), (rag_text, rag)):
        for view in ("question_only", "question_context", "context_only"):
            logprobs[(view, text)] = getattr(views, view)
    return ScriptedBackend(answers={"question_only": direct_text,
                                    "question_context": rag_text},
                           logprobs=logprobs, **kwargs)  # type: ignore[arg-type]


def margins(direct: Views, rag: Views, lambda_bind: float = 0.5) -> tuple[float, float, float]:
    """The paper's margins, written out (Section 3): M_prior, M_bind, M."""
    m_prior = rag.question_only - direct.question_only
    m_bind = ((rag.question_context - rag.context_only)
              - (direct.question_context - direct.context_only))
    return m_prior, m_bind, m_prior + lambda_bind * m_bind


def arbiter(direct: Views, rag: Views, **config: object) -> tuple[TrustMargin, ScriptedBackend]:
    """A TrustMargin on :func:`six`'s backend (config: TrustMarginConfig fields)."""
    backend = six(direct, rag)
    return TrustMargin(backend, dict(config) or None), backend
