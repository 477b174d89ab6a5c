"""LlamaIndex adapter: TrustMargin behind LlamaIndex's query engines, chat engines and retrievers.

Exports :class:`TrustMarginQueryEngine` (wraps any query engine), :class:`TrustMarginChatEngine`
(a context chat engine, arbitrated per turn), :class:`TrustMarginRetrieverQueryEngine` (the
core's own retrieve-answer-decide), :class:`TrustMarginArbiter` (two answers you already have),
:class:`PassageRetriever`, :class:`LocalLlamaIndexLLM`, :class:`PipelineQueryEngine` and
:func:`build_flare_engine`. Every decision is the core's, returned under
``Response.metadata["trustmargin"]``; docs/llamaindex.md shows their use and
docs/decisions.md why there is no node postprocessor and what the scorer's margins mean.
"""

from trustmargin_integrations.llama_index.arbiter import (
    METADATA_KEY,
    SOURCES_KEY,
    DecisionRecord,
    TrustMarginArbiter,
    TrustMarginDecisionEvent,
)
from trustmargin_integrations.llama_index.chat_engine import (
    TrustMarginChatCorrectionEvent,
    TrustMarginChatEngine,
)
from trustmargin_integrations.llama_index.flare import (
    SearchOrDoneOutputParser,
    SearchTagOutputParser,
    build_flare_engine,
)
from trustmargin_integrations.llama_index.llms import LocalLlamaIndexLLM
from trustmargin_integrations.llama_index.nodes import node_to_passage, passage_to_node
from trustmargin_integrations.llama_index.pipeline_engine import (
    PIPELINE_METADATA_KEY,
    PipelineQueryEngine,
)
from trustmargin_integrations.llama_index.query_engine import (
    CLOSED_BOOK_PROMPT_KEY,
    TrustMarginQueryEngine,
)
from trustmargin_integrations.llama_index.question_gen import LocalQuestionGenerator
from trustmargin_integrations.llama_index.retrieval import EVIDENCE_MODES, PassageRetriever
from trustmargin_integrations.llama_index.retriever_engine import (
    TrustMarginRetrieverQueryEngine,
)

__all__ = [
    "CLOSED_BOOK_PROMPT_KEY",
    "EVIDENCE_MODES",
    "METADATA_KEY",
    "PIPELINE_METADATA_KEY",
    "SOURCES_KEY",
    "DecisionRecord",
    "LocalLlamaIndexLLM",
    "LocalQuestionGenerator",
    "PassageRetriever",
    "PipelineQueryEngine",
    "SearchOrDoneOutputParser",
    "SearchTagOutputParser",
    "TrustMarginArbiter",
    "TrustMarginChatCorrectionEvent",
    "TrustMarginChatEngine",
    "TrustMarginDecisionEvent",
    "TrustMarginQueryEngine",
    "TrustMarginRetrieverQueryEngine",
    "build_flare_engine",
    "node_to_passage",
    "passage_to_node",
]
