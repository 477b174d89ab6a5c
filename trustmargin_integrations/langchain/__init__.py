"""LangChain adapter for TrustMargin: one module per LangChain role.

- :mod:`.documents`: ``Document`` <-> :class:`~trustmargin_integrations.schema.Passage`.
- :mod:`.retrievers`: :class:`TrustMarginRetriever` over any project retriever and
  :class:`PipelineRetriever` over a multi-step pipeline.
- :mod:`.inputs`: :class:`TrustMarginInput`, the router's input record, and errors that name the
  user's own keys (``documents[1]``, ``inputs[1].question``).
- :mod:`.router`: :class:`TrustMarginRouter` and its per-call settings (``tau``,
  ``lambda_bind``).
- :mod:`.llms`: :class:`LocalLLM` and :class:`LocalChatModel` on a local backend.
- :mod:`.dropin`: :func:`with_trustmargin`, TrustMargin inserted into a user's chain
  (:class:`TrustMarginChain`: the chain's own input schema and output type, both sides run
  concurrently, streaming with the sides told apart).
- :mod:`.graph`: :func:`trustmargin_node`, TrustMargin as a LangGraph node (a state update of
  its own keys, margins on the custom stream) and :class:`TrustMarginState`, those keys.
- :mod:`.rewire`: a user's LCEL chain with one part (the retriever, the prompt) swapped.
- :mod:`.decisions`: the chosen answer's text and a readable summary of a Decision.
- :mod:`.chains`: :func:`build_trustmargin_chain`.
- :mod:`.pipelines`: :class:`PipelineRunnable` and :func:`build_pipeline_chain` for IRCoT,
  FLARE, CLeHe-RAG and DTR-RAG.

The adapter is thin. It turns LangChain inputs (dicts, ``Document`` objects, chat messages)
into the core's input and returns the core :class:`~trustmargin_integrations.schema.Decision`
unchanged. Validation, passage formatting, answer cleaning and scoring all happen in the core
(:class:`~trustmargin_integrations.arbiter.TrustMargin`); the adapter only renames fields so
that errors name the keys the user passed.

The router scores with *its own* local model (``router.tm.backend``). When the two candidate
answers come from another model (a hosted chat model, say), the margins measure how the
scorer model judges those answers, not how the generating model would: the prior margin asks
"does the scorer's memory accept the RAG answer?", the binding margin asks "does the scorer
find that answer bound to this question by the passages?". The paper calibrates
``tau = -1.5`` for candidates produced by the scoring model itself, so with a different
generator treat the threshold as a starting point and re-check it on your own data.
"""

from trustmargin_integrations.langchain.chains import build_trustmargin_chain
from trustmargin_integrations.langchain.decisions import DECISION_EVENT, describe_decision
from trustmargin_integrations.langchain.documents import document_to_passage, passage_to_document
from trustmargin_integrations.langchain.dropin import (
    CORRECTION_EVENT,
    SHADOW_EVENT,
    SIDE_RUN_NAMES,
    SIDE_TAGS,
    TrustMarginChain,
    with_trustmargin,
)
from trustmargin_integrations.langchain.graph import TrustMarginState, trustmargin_node
from trustmargin_integrations.langchain.inputs import TrustMarginInput
from trustmargin_integrations.langchain.llms import LocalChatModel, LocalLLM
from trustmargin_integrations.langchain.pipelines import (
    PIPELINE_EVENT,
    PIPELINE_KEY,
    PIPELINES_KEY,
    PipelineRunnable,
    build_pipeline_chain,
)
from trustmargin_integrations.langchain.retrievers import PipelineRetriever, TrustMarginRetriever
from trustmargin_integrations.langchain.router import MARGINS_EVENT, TrustMarginRouter

__all__ = [
    "CORRECTION_EVENT",
    "DECISION_EVENT",
    "MARGINS_EVENT",
    "PIPELINES_KEY",
    "PIPELINE_EVENT",
    "PIPELINE_KEY",
    "SHADOW_EVENT",
    "SIDE_RUN_NAMES",
    "SIDE_TAGS",
    "LocalChatModel",
    "LocalLLM",
    "PipelineRetriever",
    "PipelineRunnable",
    "TrustMarginChain",
    "TrustMarginInput",
    "TrustMarginRetriever",
    "TrustMarginRouter",
    "TrustMarginState",
    "build_pipeline_chain",
    "build_trustmargin_chain",
    "describe_decision",
    "document_to_passage",
    "passage_to_document",
    "trustmargin_node",
    "with_trustmargin",
]
