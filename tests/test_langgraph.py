"""TrustMargin in a real LangGraph graph: the node returns its own state
update (the kept answer, the Decision, the margins), leaves the user's keys as they are, and
writes the margins to the custom stream.

Real parts: LangGraph's StateGraph and MemorySaver, the embedded SmolLM2 scorer and chat model,
a real BM25 index behind a LangChain retriever.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, StateGraph

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    MARGINS_EVENT,
    LocalChatModel,
    TrustMarginRetriever,
    TrustMarginRouter,
    TrustMarginState,
    trustmargin_node,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Decision, Passage

QUESTION = "Who designed the Velmora Bridge?"
CORPUS = [Passage(id="velmora", title="Velmora Bridge",
                  text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
          Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby.")]
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question in one sentence using the context.\n\nContext:\n{context}"),
    ("human", "{question}"),
])


class State(TrustMarginState):
    question: str
    documents: list[Document]
    direct_answer: str
    rag_answer: str


@pytest.fixture(scope="module")
def graph(tm: TrustMargin) -> Any:
    retriever = TrustMarginRetriever(BM25Index.build(CORPUS), k=1)
    answer = PROMPT | LocalChatModel.from_trustmargin(tm, max_new_tokens=24) | StrOutputParser()

    def retrieve(state: State) -> dict[str, Any]:
        return {"documents": retriever.invoke(state["question"])}

    def closed_book(state: State) -> dict[str, Any]:
        return {"direct_answer": answer.invoke({"question": state["question"], "context": ""})}

    def rag(state: State) -> dict[str, Any]:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {"rag_answer": answer.invoke({"question": state["question"],
                                             "context": context})}

    builder = StateGraph(State)
    builder.add_node("retrieve", retrieve)
    builder.add_node("closed_book", closed_book)
    builder.add_node("rag", rag)
    builder.add_node("trustmargin", trustmargin_node(TrustMarginRouter(tm, tau=-100.0)))
    builder.add_edge(START, "retrieve")
    builder.add_edge(START, "closed_book")
    builder.add_edge("retrieve", "rag")
    builder.add_edge(["closed_book", "rag"], "trustmargin")
    builder.add_edge("trustmargin", END)
    return builder.compile(checkpointer=MemorySaver())


def test_the_node_adds_its_keys_leaves_the_users_and_streams_the_margins(graph: Any) -> None:
    config = {"configurable": {"thread_id": "velmora"}}
    chunks = list(graph.stream({"question": QUESTION}, config,
                               stream_mode=["updates", "custom"]))
    updates = {next(iter(c)): c[next(iter(c))] for mode, c in chunks if mode == "updates"}
    custom = [c for mode, c in chunks if mode == "custom"]
    state = graph.get_state(config).values
    decision = state["decision"]
    assert isinstance(decision, Decision) and decision.source in ("rag", "agree")
    # The node's update is its own keys only; the user's full answers stay as written.
    assert set(updates["trustmargin"]) == {"answer", "decision", "margins"}
    assert state["answer"] == state["rag_answer"]
    assert decision.rag_raw in (None, state["rag_answer"].strip())
    assert "Rilke" in state["rag_answer"] and len(state["rag_answer"]) > len(decision.rag_answer)
    # The margins, in the state and on the custom stream.
    assert state["margins"]["m"] == decision.m and state["margins"]["tau"] == -100.0
    assert custom == [{MARGINS_EVENT: state["margins"]}]


def test_the_node_runs_async_and_keeps_a_messages_type(tm: TrustMargin) -> None:
    class Chat(TrustMarginState):
        question: str
        context: list[str]
        direct_answer: AIMessage
        rag_answer: AIMessage

    builder = StateGraph(Chat)
    builder.add_node("trustmargin", trustmargin_node(TrustMarginRouter(tm, tau=100.0)))
    builder.add_edge(START, "trustmargin")
    builder.add_edge("trustmargin", END)
    state = asyncio.run(builder.compile().ainvoke({
        "question": QUESTION, "context": [CORPUS[0].text],
        "direct_answer": AIMessage(content="Gustave Eiffel."),
        "rag_answer": AIMessage(content="Tomas Rilke.")}))
    assert state["decision"].source == "direct"  # tau 100: the closed-book answer is kept
    assert state["answer"] == AIMessage(content="Gustave Eiffel.", id=state["answer"].id)
    assert state["direct_answer"].content == "Gustave Eiffel."  # not rewritten


def test_errors_name_the_state_keys(tm: TrustMargin) -> None:
    node = trustmargin_node(tm, question_key="query", documents_key="hits")
    with pytest.raises(InvalidInputError) as err:
        node.invoke({"query": "   ", "hits": [], "direct_answer": "a", "rag_answer": "b"})
    assert err.value.field == "query"
    with pytest.raises(InvalidInputError) as err:
        node.invoke({"query": QUESTION, "hits": [Document(page_content="Rilke."),
                                                 Document(page_content=" ")],
                     "direct_answer": "a", "rag_answer": "b"})
    assert err.value.field == "hits[1]"
    with pytest.raises(InvalidInputError) as err:
        node.invoke({"query": QUESTION, "direct_answer": "a", "rag_answer": "b"})
    assert err.value.field == "hits"
