"""LlamaIndex adapter: a query-engine wrapper, a retrieval-to-decision engine, a response-level
arbiter, a retriever over any project retriever, and a local LLM.

- :class:`TrustMarginQueryEngine` wraps any query engine: the inner engine gives the RAG answer
  and its source nodes, an LLM answers closed-book, the core arbitrates.
- :class:`TrustMarginChatEngine` wraps a ``ContextChatEngine`` / ``CondensePlusContextChatEngine``
  per turn: the engine gives the RAG answer, its LLM answers closed-book (the same chat
  without retrieval), the kept answer is returned, streamed and remembered.
- :class:`TrustMarginRetrieverQueryEngine` is the core's own pipeline (``tm.answer``) behind a
  query engine: retrieve, let the scorer model answer both ways, arbitrate.
- :class:`TrustMarginArbiter` arbitrates two answers you already have.
- :class:`PassageRetriever` turns any project retriever (``BM25Index``,
  ``ElasticsearchRetriever``, anything with ``search(query, k)``) into a LlamaIndex retriever.
- :class:`LocalLlamaIndexLLM` is a LlamaIndex chat LLM on a project backend (until EOS, streamed).
- :class:`PipelineQueryEngine` runs a project pipeline (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) as
  a query engine, and :func:`build_flare_engine` sets LlamaIndex's
  ``FLAREInstructQueryEngine`` up for a small local model; ``TrustMarginQueryEngine``'s
  ``evidence`` option scores such multi-step answers against the question's own passages.

There is deliberately no node postprocessor: LlamaIndex node postprocessors run before
synthesis and never see an answer, while TrustMargin decides between two *answers*.

Every decision is the core's (:class:`~trustmargin_integrations.arbiter.TrustMargin`):
validation, answer cleaning, context budgeting and scoring are not re-implemented here. Each one
is returned under ``Response.metadata["trustmargin"]`` and dispatched as a
:class:`TrustMarginDecisionEvent` on LlamaIndex's instrumentation bus.

The scorer is the arbiter's own local model. When the inner engine answers with another LLM,
the margins say how the scorer model judges those answers (does its memory accept the RAG
answer, do the passages bind it to the question), not how the generating LLM would; the
paper's ``tau = -1.5`` is calibrated for same-model candidates, so re-check it on your data.

One module per framework role:

- ``nodes``: node <-> :class:`~trustmargin_integrations.schema.Passage`;
- ``responses``: reading whole answers from LlamaIndex's response types;
- ``arbiter``: :class:`TrustMarginArbiter`, :class:`TrustMarginDecisionEvent` and the
  :class:`DecisionRecord` responses carry;
- ``query_engine``: :class:`TrustMarginQueryEngine`;
- ``chat_engine``: :class:`TrustMarginChatEngine`;
- ``retriever_engine``: :class:`TrustMarginRetrieverQueryEngine`;
- ``pipeline_engine``: :class:`PipelineQueryEngine`;
- ``retrieval``: :class:`PassageRetriever` and the wrapper's evidence sources;
- ``llms``: :class:`LocalLlamaIndexLLM`;
- ``question_gen``: :class:`LocalQuestionGenerator`, sub-questions for LlamaIndex's
  ``SubQuestionQueryEngine`` from the local model;
- ``tracing``: the collector behind ``TrustMarginQueryEngine(trace=True)``;
- ``flare``: :func:`build_flare_engine` and its two output parsers.
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
