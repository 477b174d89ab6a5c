"""TrustMargin: answer-level source arbitration between a closed-book and a RAG answer.

Quick start::

    from trustmargin_integrations import TrustMargin
    tm = TrustMargin.from_pretrained()            # embedded SmolLM2-135M, offline
    decision = tm.arbitrate("Who wrote Hamlet?", ["Hamlet is a tragedy by Shakespeare."])
    decision.answer, decision.source, decision.m

    index = BM25Index.build(passages)             # or any retriever: search(query, k)
    decision = tm.answer("Who wrote Hamlet?", index, k=3)   # retrieve, answer both ways, decide
"""

from trustmargin_integrations._version import __version__ as __version__
from trustmargin_integrations.answers import answers_agree, clean_answer, normalize_answer
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import (
    BackendError,
    CacheCorruptError,
    InvalidInputError,
    ModelLoadError,
    TrustMarginError,
)
from trustmargin_integrations.margins import Margins, Verdict, compute_margins, decide, settle
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.retrieval import BM25Index, Retriever, load_corpus
from trustmargin_integrations.schema import (
    ArbitrationInput,
    Decision,
    Passage,
    PassageRef,
    Timings,
    ViewLikelihoods,
    ViewPrompts,
)

__all__ = [
    "PROMPT_VERSION",
    "ArbitrationInput",
    "BM25Index",
    "Backend",
    "BackendError",
    "CacheCorruptError",
    "Decision",
    "InvalidInputError",
    "Margins",
    "ModelLoadError",
    "Passage",
    "PassageRef",
    "Retriever",
    "Timings",
    "TrustMargin",
    "TrustMarginConfig",
    "TrustMarginError",
    "Verdict",
    "ViewLikelihoods",
    "ViewPrompts",
    "answers_agree",
    "clean_answer",
    "compute_margins",
    "decide",
    "load_corpus",
    "normalize_answer",
    "settle",
]
