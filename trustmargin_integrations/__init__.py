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
    from trustmargin_integrations.arbiter import TrustMargin
    from trustmargin_integrations.cli.chain_check import check_chain
    from trustmargin_integrations.config import TrustMarginConfig
    from trustmargin_integrations.errors import (
        BackendError,
        InvalidInputError,
        ModelLoadError,
        TrustMarginError,
    )
    from trustmargin_integrations.retrieval import BM25Index, Retriever
    from trustmargin_integrations.rule import Margins, Policy, Verdict
    from trustmargin_integrations.schema import Decision, Passage

# What a user of the plug-in calls: the arbiter and its settings, what it reads (passages, a
# retriever) and returns (the Decision; a policy's verdict and margins), the chain check, and
# the errors to catch. Everything else is imported from its own subpackage.
_MODULE_OF = {
    "TrustMargin": "arbiter",
    "TrustMarginConfig": "config",
    "Decision": "schema", "Passage": "schema",
    "Margins": "rule", "Policy": "rule", "Verdict": "rule",
    "BM25Index": "retrieval", "Retriever": "retrieval",
    "check_chain": "cli.chain_check",
    "BackendError": "errors", "InvalidInputError": "errors", "ModelLoadError": "errors",
    "TrustMarginError": "errors",
}
"""Public name -> the module (under this package) that defines it."""

# A literal list, so that type checkers and linters see the public names.
__all__ = [
    "BM25Index",
    "BackendError",
    "Decision",
    "InvalidInputError",
    "Margins",
    "ModelLoadError",
    "Passage",
    "Policy",
    "Retriever",
    "TrustMargin",
    "TrustMarginConfig",
    "TrustMarginError",
    "Verdict",
    "check_chain",
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
