"""A policy that cannot change the answer costs nothing: under always-RAG (the shipped
policy for SmolLM2) and always-Direct the drop-in and the query engine run only the kept
side, exactly as the plain chain runs, and score nothing.

Real parts: the embedded SmolLM2 model (answering and scoring), a real BM25 index behind
LangChain / LlamaIndex retrievers, real prompts and engines. The scorer is spied on (its
``_score_prepared`` counted, then run for real) so a test can assert it was never called.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from llama_index.core.base.response.schema import StreamingResponse
from llama_index.core.query_engine import RetrieverQueryEngine

from tests.spy_support import CallSpy
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.langchain import (
    LocalChatModel,
    TrustMarginRetriever,
    with_trustmargin,
)
from trustmargin_integrations.llama_index import (
    LocalLlamaIndexLLM,
    PassageRetriever,
    TrustMarginQueryEngine,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Passage

QUESTIONS = ["Who designed the Velmora Bridge?", "Which river flows through Quenby?"]
CORPUS = [
    Passage(id="velmora", title="Velmora Bridge",
            text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
    Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
]
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question in one sentence using the context.\n\nContext:\n{context}"),
    ("human", "{question}"),
])


class Counts(BaseCallbackHandler):
    """Counts the chat model calls and retriever calls of a run."""

    def __init__(self) -> None:
        self.chat = 0
        self.retrievals = 0

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            **kwargs: Any) -> None:
        self.chat += 1

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID,
                           **kwargs: Any) -> None:
        self.retrievals += 1


def spied(backend: HFBackend, policy: str) -> tuple[TrustMargin, list[int]]:
    """An arbiter deciding by ``policy`` whose scoring calls are counted (and still run)."""
    tm = TrustMargin(backend, {"policy": policy})
    calls: list[int] = []
    real = tm._score_prepared

    def score(prepared: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(prepared))
        return real(prepared, *args, **kwargs)

    tm._score_prepared = score  # type: ignore[method-assign]
    return tm, calls


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


@pytest.fixture(scope="module")
def chain(tm: TrustMargin) -> Any:
    """LangChain's tutorial chain on the real model and a real BM25 retriever."""
    retriever = TrustMarginRetriever(retriever=BM25Index.build(CORPUS), k=1)
    llm = LocalChatModel.from_trustmargin(tm, max_new_tokens=16)
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | PROMPT | llm | StrOutputParser())


def test_shipped_policy_is_always_rag_and_fixes_the_side(backend: HFBackend) -> None:
    shipped = TrustMargin.calibrated(backend, "shipped")
    assert shipped.config.decision_policy.fixed_side == "rag"
    assert Policy.always_direct().fixed_side == "direct"
    assert Policy.paper().fixed_side is None


def test_always_rag_runs_the_chain_once_and_scores_nothing(backend: HFBackend, chain: Any
                                                             ) -> None:
    tm, scored = spied(backend, "always_rag")
    guarded = with_trustmargin(chain, tm)
    counts = Counts()
    answers = [guarded.invoke(q, {"callbacks": [counts]}) for q in QUESTIONS]
    assert counts.chat == len(QUESTIONS)  # the user's chain once per question
    assert counts.retrievals == len(QUESTIONS)
    assert scored == []
    assert answers == [chain.invoke(q) for q in QUESTIONS]


def test_always_rag_streams_exactly_as_the_plain_chain(backend: HFBackend, chain: Any) -> None:
    tm, scored = spied(backend, "always_rag")
    guarded = with_trustmargin(chain, tm)
    plain = list(chain.stream(QUESTIONS[0]))
    assert len(plain) > 1  # the local model streams token by token
    assert list(guarded.stream(QUESTIONS[0])) == plain

    async def collect(runnable: Any) -> list[str]:
        return [chunk async for chunk in runnable.astream(QUESTIONS[0])]

    assert asyncio.run(collect(guarded)) == asyncio.run(collect(chain))
    assert asyncio.run(guarded.ainvoke(QUESTIONS[0])) == "".join(plain)
    assert scored == []


def test_always_direct_runs_only_the_closed_book_copy(backend: HFBackend, chain: Any) -> None:
    tm, scored = spied(backend, "always_direct")
    guarded = with_trustmargin(chain, tm)
    counts = Counts()
    answer = guarded.invoke(QUESTIONS[0], {"callbacks": [counts]})
    assert (counts.chat, counts.retrievals) == (1, 0)  # no retrieval on the closed-book copy
    assert answer == guarded.sides["direct"].invoke(QUESTIONS[0])
    assert scored == []


def test_a_margin_policy_per_call_still_scores(backend: HFBackend, chain: Any) -> None:
    tm, scored = spied(backend, "always_rag")
    guarded = with_trustmargin(chain, tm)
    counts = Counts()
    guarded.invoke(QUESTIONS[0], {"callbacks": [counts],
                                  "configurable": {"policy": "rule"}})
    assert counts.chat == 2 and scored == [1]  # both sides, one scored question


def test_output_decision_scores_nothing_under_a_fixed_side(backend: HFBackend, chain: Any
                                                           ) -> None:
    spy = CallSpy(backend)
    tm = TrustMargin(spy, {"policy": "always_rag"})  # type: ignore[arg-type]
    decision = with_trustmargin(chain, tm, output="decision").invoke(QUESTIONS[0])
    assert decision.policy == "always_rag" and decision.source == "rag"
    assert decision.reason == "policy_always_rag" and decision.m is None
    assert decision.answer == chain.invoke(QUESTIONS[0])  # the chain's answer, whole
    assert spy.calls == 0  # the arbiter ran no model: both answers came from the chain


def test_query_engine_under_always_rag_is_the_inner_engine(backend: HFBackend) -> None:
    tm, scored = spied(backend, "always_rag")
    llm = LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=16)
    retriever = PassageRetriever(BM25Index.build(CORPUS), similarity_top_k=1)
    inner = RetrieverQueryEngine.from_args(retriever, llm=llm)
    engine = TrustMarginQueryEngine(inner, tm, llm=llm)
    plain = inner.query(QUESTIONS[1])
    got = engine.query(QUESTIONS[1])
    assert got.response == plain.response
    assert [n.node_id for n in got.source_nodes] == [n.node_id for n in plain.source_nodes]
    streaming = TrustMarginQueryEngine(
        RetrieverQueryEngine.from_args(retriever, llm=llm, streaming=True), tm, llm=llm)
    streamed = streaming.query(QUESTIONS[1])
    assert isinstance(streamed, StreamingResponse)
    pieces = list(streamed.response_gen)
    assert len(pieces) > 1 and "".join(pieces) == plain.response  # token by token, live
    assert asyncio.run(engine.aquery(QUESTIONS[1])).response == plain.response
    assert scored == []


def test_query_engine_under_always_direct_asks_only_the_llm(backend: HFBackend) -> None:
    tm, scored = spied(backend, "always_direct")
    llm = LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=16)
    retriever = PassageRetriever(BM25Index.build(CORPUS), similarity_top_k=1)
    engine = TrustMarginQueryEngine(RetrieverQueryEngine.from_args(retriever, llm=llm), tm,
                                    llm=llm)
    got = engine.query(QUESTIONS[1])
    assert got.source_nodes == []
    assert got.response == llm.predict(engine.closed_book_prompt, question=QUESTIONS[1])
    assert scored == []
