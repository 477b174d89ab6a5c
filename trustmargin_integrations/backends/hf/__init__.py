"""Local transformers backend with shared-prefix scoring and generation-cache reuse.

The arbiter drives one batch of questions through :meth:`HFBackend.session`:

1. ``session.generate`` prefills the question-only prompts (and greedily decodes the Direct
   answers) in one left-padded batch, and the question-context prompts likewise for the RAG
   answers (:mod:`.decoding`). Each batch keeps its KV cache, cropped back to the prompts.
2. ``session.score`` turns every scoring request into a stem off the cached prompt it shares
   the longest token prefix with and scores all stems of a row in one tree-masked forward
   pass (:mod:`.tree`).

``score_continuations`` is the plain reference: one full forward pass per sequence. The fast
path agrees with it to about 1e-6 in fp32 (tests hold it to 1e-4).

Modules: :mod:`.loaded` (``LoadedModel``: the model, its tokenizer and what is read off them,
the one record every other part receives), :mod:`.backend` (loading, and ``HFBackend``
handing its calls to the parts), :mod:`.reference` (the plain scoring), :mod:`.batch` (a
prefilled batch and its cache), :mod:`.decoding` (the public prefill / step / greedy API
that FLARE and CLeHe use), :mod:`.static_cache`
(greedy steps on a static KV cache, one CUDA graph replay per token on CUDA), :mod:`.masks`
(4D attention masks), :mod:`.tree` (stems, planning, the tree-masked pass), :mod:`.session`
(``HFSession``).
"""

# The check below must run before the imports after it (which import torch).
# ruff: noqa: E402
from trustmargin_integrations.extras import require_local_engine

# Before torch is imported: an install without the `local` extra gets the typed error that
# names it, not a ModuleNotFoundError from deep inside.
require_local_engine()

from trustmargin_integrations.backends.hf.backend import HFBackend, pick_device, pick_dtype
from trustmargin_integrations.backends.hf.batch import DecodingBatch
from trustmargin_integrations.backends.hf.decoding import GreedyOutput, TokenDecoding
from trustmargin_integrations.backends.hf.loaded import LoadedModel
from trustmargin_integrations.backends.hf.session import HFSession
from trustmargin_integrations.backends.hf.tree import CachedPrompts, Stem, common_prefix_length

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
