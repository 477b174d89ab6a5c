"""The response-level arbiter: (query, closed-book, RAG) -> a ``Response`` with the Decision,
and the decision event it dispatches on LlamaIndex's instrumentation bus."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    PydanticResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.schema import NodeWithScore, QueryBundle

from trustmargin_integrations.arbiter import PreparedQuestion, TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index.nodes import node_ref, node_to_passage
from trustmargin_integrations.llama_index.responses import aresolve, resolve
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.sides import chosen_side

__all__ = [
    "METADATA_KEY",
    "SOURCES_KEY",
    "DecisionRecord",
    "TrustMarginArbiter",
    "TrustMarginDecisionEvent",
    "check_arbiter",
    "chosen_text",
    "dispatcher",
    "kept_sources",
]

dispatcher = instrument.get_dispatcher("trustmargin_integrations.llama_index")
"""The adapter's one dispatcher: its spans and decision events, whichever module sends them."""

METADATA_KEY = "trustmargin"
"""The key of ``Response.metadata`` holding the :class:`Decision`."""

SOURCES_KEY = "trustmargin_sources"
"""The key of ``Response.metadata`` listing every source node the RAG answer came with (id,
title and score, as JSON), whichever side is kept: when the closed-book answer is kept the
response's ``source_nodes`` are empty (no node supports that answer) and the retrieved nodes
are listed here."""


class TrustMarginDecisionEvent(BaseEvent):
    """Instrumentation event dispatched once per arbitration, carrying the core Decision.

    Register a ``BaseEventHandler`` on ``llama_index.core.instrumentation.get_dispatcher()``
    to log or monitor decisions (source, margins, warnings) without touching responses.
    """

    decision: Decision

    @classmethod
    def class_name(cls) -> str:
        """Event name, as LlamaIndex handlers see it."""
        return "TrustMarginDecisionEvent"


def check_arbiter(value: Any, field: str = "tm") -> TrustMargin:
    """``value`` when it is a TrustMargin; otherwise the error every engine and LLM of this
    adapter raises for its ``tm`` argument."""
    if not isinstance(value, TrustMargin):
        raise InvalidInputError(field, f"a {type(value).__name__} is not a TrustMargin",
                                "pass TrustMargin.from_pretrained()")
    return value


def chosen_text(decision: Decision) -> str:
    """The chosen side's text as the user's engine or LLM produced it: ``Decision.answer``,
    which the core fills with a given candidate's whole text (the compared part, where the
    two texts differ, is in ``direct_answer`` / ``rag_answer``)."""
    return decision.answer


def kept_sources(decision: Decision, nodes: Sequence[NodeWithScore],
                 metadata: dict[str, Any]) -> list[NodeWithScore]:
    """The source nodes of the kept answer (the RAG side's nodes, none for a closed-book
    answer), with the Decision and every node weighed written to ``metadata``
    (:data:`METADATA_KEY`, :data:`SOURCES_KEY`)."""
    metadata[METADATA_KEY] = DecisionRecord(decision)
    metadata[SOURCES_KEY] = [node_ref(n) for n in nodes]
    return list(nodes) if chosen_side(decision) == "rag" else []


class DecisionRecord(dict[str, Any]):
    """A :class:`Decision` as ``Response.metadata["trustmargin"]``: its JSON form as a dict,
    so ``json.dumps(response.metadata)`` works, which also answers every attribute and method
    of the Decision (``record.source``, ``record.m``; ``rule.replay.replay(record.decision)``
    replays it).

    ``record.decision`` is the Decision itself (the object the decision event carries).
    """

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.model_dump(mode="json"))
        self.decision = decision

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the dict does not have; private names are refused so that
        # copy and pickle, which probe for them before __init__ state exists, do not recurse.
        if name.startswith("_") or name == "decision":
            raise AttributeError(name)
        return getattr(self.decision, name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (DecisionRecord, (self.decision,))


def _rag_response(rag: Any, source_nodes: Sequence[NodeWithScore] | None) -> Response:
    """The RAG side as a ``Response`` holding the evidence nodes, each checked."""
    if isinstance(rag, Response):
        rag_response = rag
    elif rag is None or isinstance(rag, str):
        rag_response = Response(response=rag)
    else:
        raise InvalidInputError("rag", f"must be a Response or a string, got "
                                f"{type(rag).__name__}",
                                "pass the query engine's Response (or its text)")
    if source_nodes is not None:
        rag_response = Response(rag_response.response, list(source_nodes), rag_response.metadata)
    nodes_field = "rag.source_nodes" if source_nodes is None else "source_nodes"
    for i, node in enumerate(rag_response.source_nodes):
        if not isinstance(node, NodeWithScore):
            raise InvalidInputError(f"{nodes_field}[{i}]",
                                    f"must be a NodeWithScore, got {type(node).__name__}",
                                    "pass the nodes a LlamaIndex retriever returns")
    if rag_response.metadata and METADATA_KEY in rag_response.metadata:
        raise InvalidInputError(f"rag.metadata[{METADATA_KEY!r}]", "is already set",
                                "pass the inner engine's response, not one TrustMargin "
                                "has already arbitrated")
    return rag_response


class TrustMarginArbiter:
    """Arbitrates two answers you already have: (query, closed-book, RAG) -> ``Response``.

    Named an *arbiter*, not a postprocessor, because it is not a LlamaIndex node postprocessor
    and cannot be one: node postprocessors run before the answer exists, and this class
    decides between answers. Putting it in ``node_postprocessors=[...]`` fails when the engine
    is built (see ``callback_manager``). To arbitrate inside an engine, wrap the engine with
    :class:`~trustmargin_integrations.llama_index.TrustMarginQueryEngine`.

    The returned ``Response`` holds the chosen answer's full text as it was given (a
    four-line RAG answer comes back whole), the source nodes of that answer (the RAG answer's
    nodes when it is kept; none when the closed-book answer is kept, since no node supports
    it) and the RAG response's metadata plus two reserved keys: ``metadata["trustmargin"]``,
    the core :class:`~trustmargin_integrations.schema.Decision` as a :class:`DecisionRecord`
    (a JSON dict that reads like the Decision), and ``metadata["trustmargin_sources"]``,
    every node that was weighed (id, title, score), whichever side is kept. Without source
    nodes the closed-book answer is returned (``reason="no_evidence"``). Answers are passed
    raw; the core compares them where they differ (``TrustMarginConfig.scoring_form``) and
    the Decision keeps the compared parts in ``direct_answer`` / ``rag_answer``; its
    ``answer`` is the chosen text whole, as given.

    Args:
        tm: the arbiter; its backend is the scorer model.
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
        policy: who decides (None: ``tm.config``'s policy); an ``arbitrate`` call may name
            its own. Several arbiters with different policies share one ``tm``: no
            likelihood depends on the policy.
    """

    def __init__(self, tm: TrustMargin, *, include_prompts: bool | None = None,
                 policy: Policy | None = None) -> None:
        self.tm = check_arbiter(tm)
        self.include_prompts = include_prompts
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidInputError("policy", f"a {type(policy).__name__} is not a policy",
                                    "pass a Policy (e.g. Policy.fitted(0.5, -1.0)) or None")
        self.policy = policy

    def _refuse_node_postprocessor_role(self, _value: Any) -> None:
        raise InvalidInputError(
            "node_postprocessors", "contains a TrustMarginArbiter, which arbitrates answers, "
            "not nodes (node postprocessors run before any answer exists)",
            "wrap the engine instead: TrustMarginQueryEngine(query_engine, tm)")

    # LlamaIndex engines assign ``callback_manager`` to every node postprocessor when they are
    # built; refusing it turns a misplaced arbiter into a clear error at build time instead of
    # an AttributeError at the first query.
    callback_manager = property(fset=_refuse_node_postprocessor_role,
                                doc="Not settable: this is not a node postprocessor.")

    def _prepare(
        self,
        query: str | QueryBundle,
        direct: Any,
        rag: Any,
        source_nodes: Sequence[NodeWithScore] | None,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[PreparedQuestion, Response]:
        """The core's prepared question (validated under LlamaIndex's argument names) and the
        RAG response it came from."""
        rag_response = _rag_response(rag, source_nodes)
        nodes_field = "rag.source_nodes" if source_nodes is None else "source_nodes"
        if isinstance(direct, Response):
            direct = direct.response or ""
        item = {"question": query.query_str if isinstance(query, QueryBundle) else query,
                "passages": [node_to_passage(n) for n in rag_response.source_nodes],
                "direct_answer": direct, "rag_answer": rag_response.response,
                "metadata": metadata}
        # Prepared once, so that core errors name the LlamaIndex arguments.
        prepared = self.tm.prepare(item, names={"question": "query", "passages": nodes_field,
                                                "direct_answer": "direct", "rag_answer": "rag"})
        return prepared, rag_response

    def _decide(self, prepared: PreparedQuestion, policy: Policy | None = None) -> Decision:
        return self.tm.arbitrate_batch([prepared], include_prompts=self.include_prompts,
                                       policy=policy or self.policy)[0]

    @staticmethod
    def _result(decision: Decision, rag: Response) -> Response:
        metadata = dict(rag.metadata or {})
        nodes = kept_sources(decision, rag.source_nodes, metadata)
        dispatcher.event(TrustMarginDecisionEvent(decision=decision))
        return Response(response=chosen_text(decision), source_nodes=nodes, metadata=metadata)

    @dispatcher.span
    def arbitrate(
        self,
        query: str | QueryBundle,
        direct: Response | StreamingResponse | str | None,
        rag: Response | StreamingResponse | PydanticResponse | str | None,
        *,
        source_nodes: Sequence[NodeWithScore] | None = None,
        metadata: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
    ) -> Response:
        """Arbitrate and return the chosen answer as a ``Response``.

        Args:
            query: the user's question.
            direct: the closed-book answer (a response or its text); None lets the scorer
                model generate it with the paper's question-only prompt.
            rag: the retrieved-context answer; a response carries its source nodes, a string
                takes them from ``source_nodes``; None lets the scorer model generate it.
            source_nodes: the evidence, when not taken from ``rag`` (empty: no evidence, the
                closed-book answer is kept).
            metadata: JSON data copied to the Decision's ``metadata`` (the audit record),
                e.g. what the inner engine did.
            policy: who decides this call (None: the arbiter's policy); the model runs the
                same either way.

        Raises:
            InvalidInputError: naming the argument (``query``, ``direct``, ``rag``,
                ``rag.source_nodes[2]``...) and the fix.
        """
        item, rag_response = self._prepare(query, resolve(direct, "direct"),
                                           resolve(rag, "rag"), source_nodes, metadata)
        return self._result(self._decide(item, policy), rag_response)

    @dispatcher.span
    async def aarbitrate(
        self,
        query: str | QueryBundle,
        direct: RESPONSE_TYPE | str | None,
        rag: RESPONSE_TYPE | str | None,
        *,
        source_nodes: Sequence[NodeWithScore] | None = None,
        metadata: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
    ) -> Response:
        """Async :meth:`arbitrate` (also takes ``AsyncStreamingResponse``); scoring runs in a
        worker thread so the event loop stays free."""
        item, rag_response = self._prepare(query, await aresolve(direct, "direct"),
                                           await aresolve(rag, "rag"), source_nodes, metadata)
        decision = await asyncio.to_thread(self._decide, item, policy)
        return self._result(decision, rag_response)
