"""LangChain adapter for TrustMargin: one module per LangChain role.

:func:`with_trustmargin` (:mod:`.dropin`) inserts TrustMargin into a user's chain;
:class:`TrustMarginRouter` (:mod:`.router`), :func:`trustmargin_node` (:mod:`.graph`, LangGraph),
:class:`TrustMarginRetriever` and :class:`PipelineRetriever` (:mod:`.retrievers`),
:class:`LocalLLM` / :class:`LocalChatModel` (:mod:`.llms`), :func:`build_trustmargin_chain`
(:mod:`.chains`) and :func:`build_pipeline_chain` (:mod:`.pipelines`) cover the other roles.
The adapter only renames fields; every decision is the core's
:class:`~trustmargin_integrations.schema.Decision`, unchanged. What the scorer's margins mean
when another model wrote the answers: docs/decisions.md.
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
