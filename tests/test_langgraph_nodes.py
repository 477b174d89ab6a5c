"""TrustMargin's Runnables added to a real LangGraph graph as nodes, directly: the guarded
chain and the router read their keys from the state and return a state update;
``TrustMarginState`` composes with ``MessagesState``; every stream mode runs.

Real parts: LangGraph's StateGraph and MemorySaver, the embedded SmolLM2 model (answering and
scoring), a real BM25 index behind a LangChain retriever.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnablePassthrough
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from test_langgraph import CORPUS, PROMPT, QUESTION  # the same graph's question and corpus

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    MARGINS_EVENT,
    LocalChatModel,
    TrustMarginRetriever,
    TrustMarginRouter,
    TrustMarginState,
    with_trustmargin,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Decision

STREAM_MODES = ["values", "updates", "custom", "messages", "debug", "checkpoints", "tasks"]


class ChatState(MessagesState, TrustMarginState):
    """MessagesState and TrustMargin's keys in one state (a metaclass conflict before)."""


class QuestionState(TrustMarginState):
    question: str


class RouterState(TrustMarginState):
    question: str
    documents: list[Document]
    direct_answer: str
    rag_answer: str


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


@pytest.fixture(scope="module")
def retriever() -> TrustMarginRetriever:
    return TrustMarginRetriever(retriever=BM25Index.build(CORPUS), k=1)


@pytest.fixture(scope="module")
def chain(tm: TrustMargin, retriever: TrustMarginRetriever) -> Any:
    llm = LocalChatModel.from_trustmargin(tm, max_new_tokens=16)
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | PROMPT | llm | StrOutputParser())


def one_node_graph(state: type, node: Any, checkpointer: Any = None) -> Any:
    builder = StateGraph(state)
    builder.add_node("guard", node)
    builder.add_edge(START, "guard")
    builder.add_edge("guard", END)
    return builder.compile(checkpointer=checkpointer)


def test_messages_state_composes_with_trustmargin_state() -> None:
    keys = ChatState.__annotations__
    assert {"messages", "answer", "decision", "margins"} <= set(keys)


def test_guarded_chain_is_a_node_of_a_messages_graph(tm: TrustMargin, chain: Any) -> None:
    guarded = with_trustmargin(chain, TrustMarginRouter(tm, tau=-100.0))
    graph = one_node_graph(ChatState, guarded)
    out = graph.invoke({"messages": [HumanMessage(QUESTION)]})
    expected = guarded.invoke(QUESTION)
    assert out["answer"] == expected
    assert isinstance(out["messages"][-1], AIMessage)
    assert out["messages"][-1].content == expected
    assert out["messages"][0].content == QUESTION  # the user's message is kept


def test_guarded_chain_node_reads_the_question_key(tm: TrustMargin, chain: Any) -> None:
    guarded = with_trustmargin(chain, TrustMarginRouter(tm, tau=-100.0))
    graph = one_node_graph(QuestionState, guarded)
    out = graph.invoke({"question": QUESTION})
    assert out == {"question": QUESTION, "answer": guarded.invoke(QUESTION)}
    with pytest.raises(InvalidInputError) as err:
        graph.invoke({"answer": "x"})
    assert err.value.field == "question"


def test_guarded_chain_with_output_decision_writes_the_decision(tm: TrustMargin, chain: Any
                                                                ) -> None:
    guarded = with_trustmargin(chain, TrustMarginRouter(tm, tau=-100.0), output="decision")
    out = one_node_graph(QuestionState, guarded).invoke({"question": QUESTION})
    assert isinstance(out["decision"], Decision) and out["decision"].question == QUESTION


def test_router_is_a_node(tm: TrustMargin, retriever: TrustMarginRetriever) -> None:
    router = TrustMarginRouter(tm, tau=-100.0)
    graph = one_node_graph(RouterState, router)
    state = {"question": QUESTION, "documents": retriever.invoke(QUESTION),
             "direct_answer": "Gustave Eiffel.", "rag_answer": "Tomas Rilke."}
    out = graph.invoke(state)
    assert out["decision"].source == "rag" and out["answer"] == "Tomas Rilke."
    assert out["margins"]["m"] == out["decision"].m
    custom = list(graph.stream(state, stream_mode="custom"))
    assert custom[0][MARGINS_EVENT]["source"] == "rag"
    with pytest.raises(InvalidInputError) as err:
        graph.invoke({"question": QUESTION, "direct_answer": "a", "rag_answer": "b"})
    assert err.value.field == "documents"


@pytest.mark.parametrize("mode", STREAM_MODES)
def test_every_stream_mode_runs_the_guarded_chain_node(tm: TrustMargin, chain: Any,
                                                       mode: str) -> None:
    guarded = with_trustmargin(chain, TrustMarginRouter(tm, tau=-100.0))
    graph = one_node_graph(QuestionState, guarded, MemorySaver())
    parts = list(graph.stream({"question": QUESTION}, {"configurable": {"thread_id": mode}},
                              stream_mode=mode))
    if mode == "values":
        assert parts[-1]["answer"] == guarded.invoke(QUESTION)
    elif mode == "updates":
        assert parts == [{"guard": {"answer": guarded.invoke(QUESTION)}}]
    elif mode == "messages":
        # Both sides' chat model tokens, each tagged with its side.
        tags = {tag for _, meta in parts for tag in meta.get("tags", [])}
        assert {"trustmargin:rag", "trustmargin:direct"} <= tags
    elif mode == "custom":
        assert parts == []  # the drop-in writes its decision as a callback event instead
    else:
        # debug / checkpoints / tasks report the node's run and its update.
        assert any("answer" in str(part) for part in parts)
