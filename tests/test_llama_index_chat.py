"""TrustMarginChatEngine on real LlamaIndex chat engines (ContextChatEngine,
CondensePlusContextChatEngine), the real embedded model through the project's LlamaIndex LLM
and a real BM25 retriever. No stand-ins."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.chat_engine.types import StreamingAgentChatResponse
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from pydantic import Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index import (
    METADATA_KEY,
    LocalLlamaIndexLLM,
    PassageRetriever,
    TrustMarginChatCorrectionEvent,
    TrustMarginChatEngine,
    TrustMarginDecisionEvent,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Passage

QUESTION = "Which river flows through Quenby?"
SYSTEM = "Answer in a few words."


@pytest.fixture(scope="module")
def llm(tm: TrustMargin) -> LocalLlamaIndexLLM:
    """The engine's LLM: the session model, answering in at most 8 tokens (both sides are
    given to the arbiter, so the scorer generates nothing)."""
    return LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=8)


@pytest.fixture(scope="module")
def retriever() -> PassageRetriever:
    index = BM25Index.build([
        Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
        Passage(id="rivers", title="Rivers", text="A river flows downhill to the sea."),
    ])
    return PassageRetriever(index, similarity_top_k=2)


def context_engine(retriever: PassageRetriever, llm: LocalLlamaIndexLLM) -> ContextChatEngine:
    return ContextChatEngine.from_defaults(retriever=retriever, llm=llm, system_prompt=SYSTEM)


class Events(BaseEventHandler):
    """The TrustMargin decision and correction events dispatched during a test."""

    seen: list[Any] = Field(default_factory=list)

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, TrustMarginDecisionEvent | TrustMarginChatCorrectionEvent):
            self.seen.append(event)


@pytest.fixture
def events() -> Iterator[Events]:
    handler = Events()
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    yield handler
    root.event_handlers.remove(handler)


def closed_book(llm: LocalLlamaIndexLLM, message: str) -> str:
    """The same chat without retrieval: the engine's system prompt and the message."""
    return llm.chat([ChatMessage(role=MessageRole.SYSTEM, content=SYSTEM),
                     ChatMessage(role=MessageRole.USER, content=message)]).message.content


def test_chat_keeps_one_of_the_two_real_answers_and_remembers_it(
        tm: TrustMargin, llm: LocalLlamaIndexLLM, retriever: PassageRetriever,
        events: Events) -> None:
    plain = context_engine(retriever, llm).chat(QUESTION).response
    direct = closed_book(llm, QUESTION)
    engine = TrustMarginChatEngine(context_engine(retriever, llm), tm,
                                   policy=Policy.paper())
    response = engine.chat(QUESTION)
    decision = response.metadata[METADATA_KEY].decision
    # Both candidates are what the plain engine and its LLM closed-book say.
    assert (decision.rag_raw or decision.rag_answer) == plain.strip()
    assert (decision.direct_raw or decision.direct_answer) == direct.strip()
    kept = plain if decision.source != "direct" else direct
    assert response.response == kept == decision.answer
    assert [n.node.node_id for n in response.source_nodes] == (
        ["quenby", "rivers"] if decision.source != "direct" else [])
    # The memory holds the message and the kept answer, once.
    assert [(m.role, m.content) for m in engine.chat_history] == [
        (MessageRole.USER, QUESTION), (MessageRole.ASSISTANT, kept)]
    assert [e.decision for e in events.seen] == [decision]


def test_stream_chat_streams_the_kept_side_in_its_tokens(
        tm: TrustMargin, llm: LocalLlamaIndexLLM, retriever: PassageRetriever) -> None:
    engine = TrustMarginChatEngine(context_engine(retriever, llm), tm,
                                   policy=Policy.paper())
    response = engine.stream_chat(QUESTION)
    assert isinstance(response, StreamingAgentChatResponse)
    decision = response.metadata[METADATA_KEY].decision
    pieces = list(response.response_gen)
    assert len(pieces) > 1 and "".join(pieces) == decision.answer
    assert engine.chat_history[-1].content == decision.answer


@pytest.mark.parametrize("live", ["rag", "direct"])
def test_live_streams_before_the_decision_and_corrects_after(
        live: str, tm: TrustMargin, llm: LocalLlamaIndexLLM,
        retriever: PassageRetriever, events: Events) -> None:
    plain = (context_engine(retriever, llm).chat(QUESTION).response if live == "rag"
             else closed_book(llm, QUESTION))
    engine = TrustMarginChatEngine(context_engine(retriever, llm), tm, live=live,
                                   policy=Policy.paper())
    response = engine.stream_chat(QUESTION)
    stream = response.response_gen
    first = next(stream)
    assert events.seen == []  # a token came before any decision was made
    pieces = [first, *stream]
    assert len(pieces) > 1 and "".join(pieces).strip() == plain.strip()
    decision = response.metadata[METADATA_KEY].decision
    corrections = [e for e in events.seen if isinstance(e, TrustMarginChatCorrectionEvent)]
    kept_other = decision.source not in (live, "agree")
    assert len(corrections) == int(kept_other)
    if kept_other:
        assert corrections[0].answer == decision.answer
    assert engine.chat_history[-1].content == decision.answer


def test_fixed_side_runs_only_that_side_unscored(
        tm: TrustMargin, llm: LocalLlamaIndexLLM, retriever: PassageRetriever,
        events: Events) -> None:
    plain = context_engine(retriever, llm).chat(QUESTION).response
    rag = TrustMarginChatEngine(context_engine(retriever, llm), tm,
                                policy=Policy.always_rag())
    response = rag.chat(QUESTION)
    assert response.response == plain and not (response.metadata or {}).get(METADATA_KEY)
    streamed = rag.stream_chat(QUESTION)
    assert "".join(streamed.response_gen).strip() == plain.strip()
    direct = TrustMarginChatEngine(context_engine(retriever, llm), tm,
                                   policy=Policy.always_direct())
    assert direct.chat(QUESTION).response == closed_book(llm, QUESTION)
    assert direct.chat_history[-1].content == closed_book(llm, QUESTION)
    assert events.seen == []  # nothing was scored


def test_async_chat_and_stream_and_condense_plus_context(
        tm: TrustMargin, llm: LocalLlamaIndexLLM, retriever: PassageRetriever) -> None:
    engine = TrustMarginChatEngine(
        CondensePlusContextChatEngine.from_defaults(retriever=retriever, llm=llm,
                                                    skip_condense=True),
        tm, policy=Policy.paper())
    first = engine.chat(QUESTION)

    async def run() -> tuple[Any, str, Any]:
        answer = await engine.achat("And which river reaches the sea?")
        streamed = await engine.astream_chat(QUESTION)
        return answer, "".join([p async for p in streamed.async_response_gen()]), streamed

    second, text, streamed = asyncio.run(run())
    for response in (first, second):
        assert response.response == response.metadata[METADATA_KEY].decision.answer
    assert text == streamed.metadata[METADATA_KEY].decision.answer
    # Three turns, each remembered with its kept answer.
    assert [m.content for m in engine.chat_history[1::2]] == [
        first.response, second.response, text]


def test_refuses_other_engines_and_bad_live(tm: TrustMargin,
                                            llm: LocalLlamaIndexLLM,
                                            retriever: PassageRetriever) -> None:
    with pytest.raises(InvalidInputError) as info:
        TrustMarginChatEngine(SimpleChatEngine.from_defaults(llm=llm), tm)
    assert info.value.field == "chat_engine" and "ContextChatEngine" in info.value.fix
    with pytest.raises(InvalidInputError) as info:
        TrustMarginChatEngine(context_engine(retriever, llm), tm, live="both")  # type: ignore[arg-type]
    assert info.value.field == "live"
    engine = TrustMarginChatEngine(context_engine(retriever, llm), tm)
    with pytest.raises(InvalidInputError) as info:
        engine.chat("   ")
    assert info.value.field == "message"
