"""TrustMargin: answer-level source arbitration between a closed-book and a RAG answer.

Quick start::

    from trustmargin_integrations import TrustMargin
    tm = TrustMargin.from_pretrained()            # embedded SmolLM2-135M, offline
    decision = tm.arbitrate("Who wrote Hamlet?", ["Hamlet is a tragedy by Shakespeare."])
    decision.answer, decision.source, decision.m

    index = BM25Index.build(passages)             # or any retriever: search(query, k)
    decision = tm.answer("Who wrote Hamlet?", index, k=3)   # retrieve, answer both ways, decide

The names below load their modules on first use (PEP 562), so light imports stay light.
"""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

from trustmargin_integrations._version import __version__ as __version__

# In a Jupyter kernel without ipywidgets, importing tqdm.auto (as transformers and the
# arbiter's optional progress bar do) warns "IProgress not found" and falls back to a text bar
# that works. The warning is about the notebook's widgets, not about anything this package
# does, so this one message, from tqdm only, is not shown.
warnings.filterwarnings("ignore", message="IProgress not found", module=r"tqdm(\.|$)")

if TYPE_CHECKING:
    from trustmargin_integrations.answers import answers_agree, clean_answer, normalize_answer
    from trustmargin_integrations.arbiter import TrustMargin
    from trustmargin_integrations.backends.base import Backend
    from trustmargin_integrations.cli.chain_check import check_chain
    from trustmargin_integrations.config import TrustMarginConfig
    from trustmargin_integrations.errors import (
        BackendError,
        CacheCorruptError,
        InvalidInputError,
        ModelLoadError,
        TrustMarginError,
    )
    from trustmargin_integrations.prompts import PROMPT_VERSION
    from trustmargin_integrations.retrieval import BM25Index, Retriever, load_corpus
    from trustmargin_integrations.rule import Margins, Policy, Verdict, compute_margins, settle
    from trustmargin_integrations.rule.positional import decide
    from trustmargin_integrations.schema import (
        Decision,
        Passage,
        PassageRef,
        Timings,
        ViewLikelihoods,
        ViewPrompts,
    )
    from trustmargin_integrations.validation import ArbitrationInput

_MODULE_OF = {
    "answers_agree": "answers", "clean_answer": "answers", "normalize_answer": "answers",
    "TrustMargin": "arbiter",
    "check_chain": "cli.chain_check",
    "Backend": "backends.base",
    "TrustMarginConfig": "config",
    "BackendError": "errors", "CacheCorruptError": "errors", "InvalidInputError": "errors",
    "ModelLoadError": "errors", "TrustMarginError": "errors",
    "Margins": "rule", "Policy": "rule", "Verdict": "rule", "compute_margins": "rule",
    "decide": "rule.positional", "settle": "rule",
    "PROMPT_VERSION": "prompts",
    "BM25Index": "retrieval", "Retriever": "retrieval", "load_corpus": "retrieval",
    "ArbitrationInput": "validation", "Decision": "schema", "Passage": "schema",
    "PassageRef": "schema", "Timings": "schema", "ViewLikelihoods": "schema",
    "ViewPrompts": "schema",
}
"""Public name -> the module (under this package) that defines it."""

# A literal list, so that type checkers and linters see the public names.
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
    "Policy",
    "Retriever",
    "Timings",
    "TrustMargin",
    "TrustMarginConfig",
    "TrustMarginError",
    "Verdict",
    "ViewLikelihoods",
    "ViewPrompts",
    "answers_agree",
    "check_chain",
    "clean_answer",
    "compute_margins",
    "decide",
    "load_corpus",
    "normalize_answer",
    "settle",
]


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use and cache the name here."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's attributes with the lazily exported names (for completion)."""
    return sorted({*globals(), *__all__})
