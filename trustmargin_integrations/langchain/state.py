"""A LangGraph state as TrustMargin's input, and TrustMargin's output as a state update.

One place for the key mapping that :func:`~.graph.trustmargin_node`, a
:class:`~.router.TrustMarginRouter` added as a node and a guarded chain added as a node all
use. LangGraph runs a node with its state as the input and ``metadata["langgraph_node"]`` in
the config; :func:`runs_as_node` tells such a call from one of TrustMargin's own nested calls
(marked by :func:`inner_config`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.sides import chosen_side

NODE_METADATA_KEY = "langgraph_node"
"""The metadata key LangGraph sets in the config of every node it runs."""

INNER_METADATA_KEY = "trustmargin_inner"
"""Set by TrustMargin on its own nested calls (the drop-in's router, a node's router), so a
nested call inside a graph node does not read its input as the graph's state."""

MESSAGES_KEY = "messages"
"""The key of ``MessagesState``'s messages."""


def runs_as_node(value: Any, config: RunnableConfig | None) -> bool:
    """True when LangGraph runs this Runnable as a node (its input is the state)."""
    metadata = (config or {}).get("metadata") or {}
    return (isinstance(value, Mapping) and NODE_METADATA_KEY in metadata
            and not metadata.get(INNER_METADATA_KEY))


def inner_config(config: RunnableConfig) -> RunnableConfig:
    """``config`` for one of TrustMargin's own nested calls (see :func:`runs_as_node`)."""
    return {**config, "metadata": {**(config.get("metadata") or {}), INNER_METADATA_KEY: True}}


def last_human_text(state: Mapping[str, Any]) -> str | None:
    """The text of the last human message of a ``MessagesState`` (None: no such message)."""
    messages = state.get(MESSAGES_KEY)
    if not isinstance(messages, Sequence):
        return None
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return None


def state_question(state: Mapping[str, Any], key: str) -> Any:
    """The question of a graph's state: ``state[key]``, else the last human message's text
    (a ``MessagesState`` graph); None when neither is there (the caller's check names
    ``key``)."""
    value = state.get(key)
    return value if value is not None else last_human_text(state)


@dataclass(frozen=True)
class StateKeys:
    """The state keys TrustMargin reads and writes in a graph (the defaults are
    :class:`~.graph.TrustMarginState`'s and the router's input names)."""

    question: str = "question"
    direct_answer: str = "direct_answer"
    rag_answer: str = "rag_answer"
    documents: str = "documents"
    context: str = "context"
    answer: str = "answer"
    decision: str = "decision"
    margins: str = "margins"

    def router_input(self, state: Any) -> dict[str, Any]:
        """The router's input from the state: the question (or the last human message), both
        answers (a message's text) and the evidence (Documents, else passage strings)."""
        if not isinstance(state, Mapping):
            raise InvalidInputError("state", f"is a {type(state).__name__}",
                                    "use the node in a graph whose state is a dict (TypedDict)")
        item: dict[str, Any] = {"question": state_question(state, self.question)}
        for field, key in (("direct_answer", self.direct_answer),
                           ("rag_answer", self.rag_answer)):
            value = state.get(key)
            item[field] = value.text if isinstance(value, BaseMessage) else value
        if state.get(self.documents) is not None:
            item["documents"] = state[self.documents]
        elif state.get(self.context) is not None:
            item["context"] = state[self.context]
        else:
            raise InvalidInputError(self.documents, "is missing from the state (and so is "
                                    f"{self.context!r})", "retrieve before this node and store "
                                    f"the documents under {self.documents!r} ([] when nothing "
                                    "was found)")
        return item

    def renamed(self, exc: InvalidInputError) -> InvalidInputError:
        """``exc`` with the router's field name replaced by the state key it was read from."""
        names = {"question": self.question, "direct_answer": self.direct_answer,
                 "rag_answer": self.rag_answer, "documents": self.documents,
                 "context": self.context}
        head, dot, rest = exc.field.partition(".")
        base, bracket, index = head.partition("[")
        key = names.get(base, base)
        return InvalidInputError(f"{key}{bracket}{index}{dot}{rest}", exc.problem, exc.fix)

    def update(self, state: Mapping[str, Any], decision: Decision,
               margins: dict[str, Any]) -> dict[str, Any]:
        """The node's state update: the kept side's value as the state held it, the Decision
        and the margins (the user's own keys are left as they are)."""
        kept = self.direct_answer if chosen_side(decision) == "direct" else self.rag_answer
        value = state.get(kept)
        return {self.answer: value if value is not None else decision.answer,
                self.decision: decision, self.margins: margins}


def stream_writer() -> Any:
    """LangGraph's custom-stream writer in a running graph; None outside one (or without
    LangGraph installed: it is only needed to run a graph)."""
    try:
        from langgraph.config import get_stream_writer
    except ImportError:
        return None
    try:
        return get_stream_writer()
    except RuntimeError:  # not inside a graph run: nothing to stream to
        return None
