"""The guarded chain keeps the user chain's input schema and output type, and tells its two
sides apart while streaming.

Real parts: the embedded SmolLM2 scorer (``tm``), a real BM25 index behind a real LangChain
retriever, real prompts (a ``MessagesPlaceholder`` history included), parsers, ``.assign``
and tools. The chat model that writes the two answers is scripted (a ``GenericFakeChatModel``
subclass) where a test must know both answers in advance; it says so. The side that wins is
set with the rule's threshold (``tau`` of -100 keeps RAG, +100 keeps Direct), so no test
depends on how the scorer judges two different answers.
"""

from __future__ import annotations

import asyncio
import threading
from operator import itemgetter
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableParallel, RunnablePassthrough
from pydantic import Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    CORRECTION_EVENT,
    DECISION_EVENT,
    SIDE_TAGS,
    TrustMarginRetriever,
    TrustMarginRouter,
    with_trustmargin,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Decision, Passage

QUESTION = "Who designed the Velmora Bridge?"
CORPUS = [
    Passage(id="velmora", title="Velmora Bridge",
            text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
    Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
]
RAG_TEXT = "The Velmora Bridge was designed by the engineer Tomas Rilke."
DIRECT_TEXT = "I believe it was Gustave Eiffel."
HISTORY = [("human", "I am planning a trip to Oststadt."), ("ai", "Oststadt is lovely.")]
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question using the context.\n\nContext:\n{context}"),
    ("human", "{question}"),
])
HISTORY_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question using the context.\n\nContext:\n{context}"),
    MessagesPlaceholder("history"),
    ("human", "{question}"),
])


class ScriptedChat(GenericFakeChatModel):
    """Scripted answers (the RAG text when the prompt carries the passage, else the Direct
    text), streamed word by word; every prompt it sees is recorded."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def _answer(self, messages: list[BaseMessage]) -> str:
        with _LOCK:
            self.seen.append(list(messages))
        return RAG_TEXT if "Tomas Rilke" in "\n".join(m.text for m in messages) else DIRECT_TEXT

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        text = self._answer(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None,
                **kwargs: Any) -> Any:
        words = self._answer(messages).split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


_LOCK = threading.Lock()


def scripted() -> ScriptedChat:
    return ScriptedChat(messages=iter(()), seen=[])


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


@pytest.fixture(scope="module")
def retriever() -> TrustMarginRetriever:
    return TrustMarginRetriever(BM25Index.build(CORPUS), k=1)


@pytest.fixture(scope="module")
def keep_rag(tm: TrustMargin) -> TrustMarginRouter:
    return TrustMarginRouter(tm, tau=-100.0)  # M > -100: the RAG side is kept


@pytest.fixture(scope="module")
def keep_direct(tm: TrustMargin) -> TrustMarginRouter:
    return TrustMarginRouter(tm, tau=100.0)  # M <= 100: the Direct side is kept


class Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.custom: dict[str, Any] = {}

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.custom[name] = data


def history_chain(retriever: Any, chat: Any) -> Any:
    return ({"context": itemgetter("question") | retriever | format_docs,
             "question": itemgetter("question"), "history": itemgetter("history")}
            | HISTORY_PROMPT | chat | StrOutputParser())


# -- the input schema -------------------------------------------------------------------------


def test_a_history_chain_keeps_every_input_key_and_names_a_missing_one(
        retriever: TrustMarginRetriever, keep_rag: TrustMarginRouter) -> None:
    chat = scripted()
    chain = history_chain(retriever, chat)
    guarded = with_trustmargin(chain, keep_rag)
    schema = guarded.get_input_jsonschema()
    assert set(schema["properties"]) == {"question", "history"}
    assert set(schema["required"]) == {"question", "history"}
    assert guarded.get_input_jsonschema() == chain.get_input_jsonschema()
    assert guarded.invoke({"question": QUESTION, "history": HISTORY}) == RAG_TEXT
    # Both sides saw the conversation, through the user's own prompt.
    assert len(chat.seen) == 2
    assert all(m[1].text == HISTORY[0][1] and m[2].text == HISTORY[1][1] for m in chat.seen)
    with pytest.raises(InvalidInputError) as err:
        guarded.invoke({"question": QUESTION})
    assert err.value.field == "history" and "is missing" in err.value.problem


def test_the_guarded_chain_as_a_tool_takes_every_key_or_names_the_missing_one(
        retriever: TrustMarginRetriever, keep_direct: TrustMarginRouter) -> None:
    tool = with_trustmargin(history_chain(retriever, scripted()), keep_direct).as_tool(
        name="bridges", description="Answers questions about bridges.")
    assert set(tool.args) == {"question", "history"}
    assert tool.invoke({"question": QUESTION, "history": HISTORY}) == DIRECT_TEXT
    with pytest.raises(InvalidInputError) as err:
        tool.invoke({"question": QUESTION})
    assert err.value.field == "history"


# -- the output type --------------------------------------------------------------------------


def test_a_chain_ending_in_a_chat_model_returns_the_kept_sides_ai_message(
        retriever: TrustMarginRetriever, keep_rag: TrustMarginRouter,
        keep_direct: TrustMarginRouter) -> None:
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} \
        | PROMPT | scripted()
    for router, text in ((keep_rag, RAG_TEXT), (keep_direct, DIRECT_TEXT)):
        guarded = with_trustmargin(chain, router)
        answer = guarded.invoke(QUESTION)
        assert isinstance(answer, AIMessage) and answer.content == text
        assert guarded.OutputType is chain.OutputType
        streamed = list(guarded.stream(QUESTION))
        assert all(isinstance(c, AIMessageChunk) for c in streamed) and len(streamed) > 3
        assert "".join(c.content for c in streamed) == text


def test_the_with_sources_shape_returns_the_kept_sides_dict(
        retriever: TrustMarginRetriever, keep_rag: TrustMarginRouter,
        keep_direct: TrustMarginRouter) -> None:
    # LangChain's "returning sources" tutorial shape: the documents stay in the output.
    answer = (RunnablePassthrough.assign(context=lambda x: format_docs(x["context"]))
              | PROMPT | scripted() | StrOutputParser())
    chain = RunnableParallel({"context": retriever, "question": RunnablePassthrough()}
                             ).assign(answer=answer)
    events = Events()
    rag = with_trustmargin(chain, keep_rag).invoke(QUESTION, config={"callbacks": [events]})
    assert set(rag) == {"context", "question", "answer"} and rag["answer"] == RAG_TEXT
    assert [d.id for d in rag["context"]] == ["velmora"] and rag["question"] == QUESTION
    assert Decision.model_validate(events.custom[DECISION_EVENT]).source == "rag"
    # The Direct side's own dict: its answer, and the empty context it was given (its
    # answer rests on no source).
    direct = with_trustmargin(chain, keep_direct).invoke(QUESTION)
    assert direct == {"context": [], "question": QUESTION, "answer": DIRECT_TEXT}
    decision = with_trustmargin(chain, keep_direct, output="decision").invoke(QUESTION)
    assert decision.rag_raw == RAG_TEXT and [p.id for p in decision.passages] == ["velmora"]


def test_a_dict_without_an_answer_key_is_named(retriever: TrustMarginRetriever,
                                                keep_rag: TrustMarginRouter) -> None:
    chain = RunnableParallel({"context": retriever, "question": RunnablePassthrough()}
                             ).assign(reply=PROMPT | scripted() | StrOutputParser(),
                                      length=lambda x: 1)
    with pytest.raises(InvalidInputError) as err:
        with_trustmargin(chain, keep_rag).invoke(QUESTION)
    assert err.value.field == "answer_key"
    assert with_trustmargin(chain, keep_rag, answer_key="reply").invoke(QUESTION)["reply"] \
        == RAG_TEXT


# -- streaming --------------------------------------------------------------------------------


def tutorial(retriever: Any) -> Any:
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | PROMPT | scripted() | StrOutputParser())


def test_stream_events_tell_the_two_sides_apart(retriever: TrustMarginRetriever,
                                                keep_rag: TrustMarginRouter) -> None:
    guarded = with_trustmargin(tutorial(retriever), keep_rag)

    async def collect() -> list[dict[str, Any]]:
        return [e async for e in guarded.astream_events(QUESTION, version="v2")]

    events = asyncio.run(collect())
    tokens: dict[str, str] = {}
    for event in events:
        if event["event"] == "on_chat_model_stream":
            side = [s for s, tag in SIDE_TAGS.items() if tag in event["tags"]]
            assert len(side) == 1, event["tags"]  # each token belongs to exactly one side
            assert event["metadata"]["trustmargin_side"] == side[0]
            tokens[side[0]] = tokens.get(side[0], "") + event["data"]["chunk"].content
    # A renderer filtering on one tag gets that side's answer, not "TheThe Vel Vel...".
    assert tokens == {"rag": RAG_TEXT, "direct": DIRECT_TEXT}
    names = {e["name"] for e in events if e["event"] == "on_chain_start"}
    assert {"trustmargin_rag", "trustmargin_direct", "TrustMarginChain"} <= names
    # The guarded chain's own stream is the kept side's answer, then the decision event.
    own = "".join(e["data"]["chunk"] for e in events
                  if e["event"] == "on_chain_stream" and e["name"] == "TrustMarginChain")
    assert own == RAG_TEXT
    assert any(e["event"] == "on_custom_event" and e["name"] == DECISION_EVENT for e in events)


def test_stream_yields_the_kept_sides_chunks_once_decided(
        retriever: TrustMarginRetriever, keep_direct: TrustMarginRouter) -> None:
    guarded = with_trustmargin(tutorial(retriever), keep_direct)
    chunks = list(guarded.stream(QUESTION))
    assert len(chunks) > 3 and "".join(chunks) == DIRECT_TEXT  # the side's own chunks

    async def collect() -> list[str]:
        return [c async for c in guarded.astream(QUESTION)]

    assert asyncio.run(collect()) == chunks


def test_a_live_stream_corrects_itself_when_the_other_side_wins(
        retriever: TrustMarginRetriever, keep_rag: TrustMarginRouter,
        keep_direct: TrustMarginRouter) -> None:
    events = Events()
    live = with_trustmargin(tutorial(retriever), keep_direct, live="rag")
    streamed = "".join(live.stream(QUESTION, config={"callbacks": [events]}))
    assert streamed == RAG_TEXT  # the RAG side, as it was generated
    correction = events.custom[CORRECTION_EVENT]
    assert (correction["side"], correction["answer"]) == ("direct", DIRECT_TEXT)
    assert correction["decision"]["source"] == "direct"
    quiet = Events()
    kept = with_trustmargin(tutorial(retriever), keep_rag, live="rag")
    assert "".join(kept.stream(QUESTION, config={"callbacks": [quiet]})) == RAG_TEXT
    assert CORRECTION_EVENT not in quiet.custom and DECISION_EVENT in quiet.custom
    with pytest.raises(InvalidInputError) as err:
        with_trustmargin(tutorial(retriever), keep_rag, live="rag", output="decision")
    assert err.value.field == "live"


@pytest.mark.slow
def test_the_guarded_chain_stays_a_full_runnable(retriever: TrustMarginRetriever,
                                                 tm: TrustMargin) -> None:
    guarded = with_trustmargin(tutorial(retriever), tm)
    # Per-call settings reach the router: tau 100 keeps Direct, -100 RAG.
    direct = guarded.with_config(configurable={"tau": 100.0})
    assert direct.invoke(QUESTION) == DIRECT_TEXT
    rag = guarded.with_config(configurable={"tau": -100.0})
    assert rag.batch([QUESTION, QUESTION]) == [RAG_TEXT, RAG_TEXT]
    assert asyncio.run(rag.abatch([QUESTION])) == [RAG_TEXT]
    assert rag.with_retry(stop_after_attempt=2).invoke(QUESTION) == RAG_TEXT
    assert {s.id for s in guarded.config_specs} >= {"tau", "lambda_bind"}
