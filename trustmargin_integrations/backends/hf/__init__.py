"""Local transformers backend with shared-prefix scoring and generation-cache reuse.

Through :meth:`HFBackend.session`, ``generate`` prefills and decodes the question-only and
question-context prompts in left-padded batches keeping their KV caches (:mod:`.decoding`),
and ``score`` scores every request as a stem off the cached prompt it shares the longest
prefix with, in one tree-masked forward pass per row (:mod:`.tree`). ``score_continuations``
is the plain reference the fast path is tested against (agreement: docs/decisions.md).
:mod:`.loaded` holds ``LoadedModel``, the one record (model, tokenizer, what is read off them)
every other part receives; ``HFBackend`` hands its calls to those parts.
"""

# The check below must run before the imports after it (which import torch).
# ruff: noqa: E402
from trustmargin_integrations.extras import require_local_engine

# Before torch is imported: an install without the `local` extra gets the typed error that
# names it, not a ModuleNotFoundError from deep inside.
require_local_engine()

from trustmargin_integrations.backends.hf.backend import HFBackend, pick_device, pick_dtype
from trustmargin_integrations.backends.hf.batch import DecodingBatch
from trustmargin_integrations.backends.hf.decoding import (
    GreedyOutput,
    TokenDecoding,
    common_prefix_length,
)
from trustmargin_integrations.backends.hf.loaded import LoadedModel
from trustmargin_integrations.backends.hf.session import HFSession
from trustmargin_integrations.backends.hf.tree import CachedPrompts, Stem

__all__ = [
    "CachedPrompts",
    "DecodingBatch",
    "GreedyOutput",
    "HFBackend",
    "HFSession",
    "LoadedModel",
    "Stem",
    "TokenDecoding",
    "common_prefix_length",
    "pick_device",
    "pick_dtype",
]
