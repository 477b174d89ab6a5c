"""Shadow mode: the answer path runs one side at the plain chain's pace, the decision comes
later from the background queue, to callbacks / instrumentation and to a JSONL log that
``trustmargin check`` reads once labels are added.

Real parts: the embedded SmolLM2 model (``tm`` fixture) as the LangChain chat model, the
LlamaIndex LLM and the scorer; a real BM25 index; real LangChain prompts and parsers; a real
LlamaIndex ``RetrieverQueryEngine``. The one stand-in is a chain step that raises, to make
the shadow side fail on purpose (said where it is used).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import llama_index.core.instrumentation as instrument
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.query_engine import RetrieverQueryEngine
from pydantic import Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import load_examples
from trustmargin_integrations.langchain import (
    SHADOW_EVENT,
    LocalChatModel,
    TrustMarginRetriever,
    with_trustmargin,
)
from trustmargin_integrations.llama_index import (
    LocalLlamaIndexLLM,
    PassageRetriever,
    TrustMarginDecisionEvent,
    TrustMarginQueryEngine,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Decision, Passage
from trustmargin_integrations.shadow import Shadow, ShadowLog

QUESTION = "Who designed the Velmora Bridge?"
CORPUS = [
    Passage(id="velmora", title="Velmora Bridge",
            text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
    Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
]
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question using the context.\n\nContext:\n{context}"),
    ("human", "{question}"),
])


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


@pytest.fixture(scope="module")
def chain(tm: TrustMargin) -> Any:
    """LangChain's tutorial RAG chain on the embedded model (short answers)."""
    retriever = TrustMarginRetriever(retriever=BM25Index.build(CORPUS), k=1)
    llm = LocalChatModel.from_trustmargin(tm, max_new_tokens=8)
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | PROMPT | llm | StrOutputParser())


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append((name, data))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_langchain_answer_is_the_plain_chains_and_the_log_gets_the_decision(
        tm: TrustMargin, chain: Any, tmp_path: Path) -> None:
    plain = chain.invoke(QUESTION)
    log = tmp_path / "shadow.jsonl"
    shadow = Shadow(log)
    # The arbiter's own policy is the paper's rule: in shadow mode the answer is still the
    # user's chain as deployed, and the rule decides off the answer path.
    guarded = with_trustmargin(chain, tm, shadow=shadow)
    recorder = Recorder()
    assert guarded.invoke(QUESTION, {"callbacks": [recorder]}) == plain
    streamed = list(guarded.stream(QUESTION))
    assert "".join(streamed) == plain and len(streamed) > 1
    assert shadow.flush(timeout=120)
    assert (shadow.stats.done, shadow.stats.failed, shadow.stats.dropped) == (2, 0, 0)
    records = lines(log)
    assert len(records) == 2
    for record in records:
        decision = Decision.model_validate(record["decision"])
        assert record["question"] == decision.question == QUESTION
        assert record["rag_answer"] == plain and record["served"] == "rag"
        assert record["direct_answer"] and record["direct_answer"] != plain
        assert record["passages"] == [{"title": "Velmora Bridge", "text": CORPUS[0].text}]
        assert decision.policy == "rule" and decision.tau == -1.5 and decision.m is not None
        assert "answer" not in record  # the gold label the user adds
    # The callback event carried the same decision.
    shadowed = [data for name, data in recorder.events if name == SHADOW_EVENT]
    assert len(shadowed) == 1 and shadowed[0]["decision"] == records[0]["decision"]
    assert shadowed[0]["would_change"] == (records[0]["decision"]["source"] == "direct")
    # Labeled, the log is a file `trustmargin check` reads with the chain's own answers.
    log.write_text("".join(json.dumps({**r, "answer": "Tomas Rilke"}) + "\n"
                           for r in records), encoding="utf-8")
    examples = load_examples(log)
    assert [e.chain.rag for e in examples] == [plain, plain]  # type: ignore[union-attr]
    assert examples[0].passages and examples[0].passages[0].text == CORPUS[0].text


def test_langchain_async_and_a_fixed_side_served_alone(tm: TrustMargin, chain: Any,
                                                       tmp_path: Path) -> None:
    shadow = Shadow(tmp_path / "shadow.jsonl", policy=Policy.paper())
    # The served side is the policy's fixed side: always-Direct serves the closed-book copy.
    guarded = with_trustmargin(chain, tm, shadow=shadow).with_config(
        configurable={"policy": "always_direct"})
    closed_book = with_trustmargin(chain, tm).with_config(
        configurable={"policy": "always_direct"}).invoke(QUESTION)
    assert asyncio.run(guarded.ainvoke(QUESTION)) == closed_book
    assert shadow.flush(timeout=120)
    [record] = lines(tmp_path / "shadow.jsonl")
    assert record["served"] == "direct" and record["direct_answer"] == closed_book
    decision = Decision.model_validate(record["decision"])
    assert decision.policy == "rule" and decision.m is not None  # the shadow policy decided


def test_a_full_queue_drops_without_blocking(tm: TrustMargin, chain: Any, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    shadow = Shadow(tmp_path / "shadow.jsonl", max_pending=1)
    gate, running = threading.Event(), threading.Event()

    def busy() -> None:
        running.set()
        gate.wait()

    shadow.submit(busy)
    assert running.wait(10)  # the worker is busy until the gate opens
    assert shadow.submit(gate.wait)  # the one pending slot
    guarded = with_trustmargin(chain, tm, shadow=shadow)
    plain = chain.invoke(QUESTION)
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations.shadow"):
        assert guarded.invoke(QUESTION) == plain  # returned although the queue is full
    assert shadow.stats.dropped == 1 and "dropped" in caplog.text
    gate.set()
    assert shadow.flush(timeout=30)
    assert not (tmp_path / "shadow.jsonl").exists()  # the dropped decision was not made


def test_a_shadow_failure_does_not_fail_the_call(tm: TrustMargin, chain: Any, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    # A stand-in: a closed-book prompt whose formatting raises makes the Direct side (run
    # only in the shadow) fail.
    def broken(_: Any) -> Any:
        raise RuntimeError("closed-book side is down")

    shadow = Shadow(tmp_path / "shadow.jsonl")
    guarded = with_trustmargin(chain, tm, shadow=shadow,
                               closed_book_prompt=RunnableLambda(broken) | PROMPT)
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations.shadow"):
        assert guarded.invoke(QUESTION) == chain.invoke(QUESTION)
        assert shadow.flush(timeout=60)
    assert shadow.stats.failed == 1 and "closed-book side is down" in caplog.text


def test_shadow_arguments_are_checked(tm: TrustMargin, chain: Any, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as info:
        with_trustmargin(chain, tm, shadow=Shadow(), live="rag")
    assert info.value.field == "shadow"
    with pytest.raises(InvalidInputError) as info:
        Shadow(max_pending=0)
    assert info.value.field == "shadow.max_pending"
    with pytest.raises(InvalidInputError) as info:
        ShadowLog(tmp_path / "missing" / "log.jsonl")
    assert info.value.field == "shadow_log"
    (tmp_path / "old.jsonl").write_text('{"kept": 1}\n', encoding="utf-8")
    ShadowLog(tmp_path / "old.jsonl").append({"new": 2})  # appended, never clobbered
    assert lines(tmp_path / "old.jsonl") == [{"kept": 1}, {"new": 2}]


class Decisions(BaseEventHandler):
    seen: list[Decision] = Field(default_factory=list)

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, TrustMarginDecisionEvent):
            self.seen.append(event.decision)


@pytest.mark.slow
def test_llama_index_query_engine_shadow(tm: TrustMargin, tmp_path: Path) -> None:
    llm = LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=8)
    retriever = PassageRetriever(BM25Index.build(CORPUS), similarity_top_k=1)
    plain = RetrieverQueryEngine.from_args(retriever, llm=llm).query(QUESTION)
    shadow = Shadow(tmp_path / "shadow.jsonl")
    engine = TrustMarginQueryEngine(RetrieverQueryEngine.from_args(retriever, llm=llm), tm,
                                    llm=llm, shadow=shadow)
    handler = Decisions()
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    try:
        response = engine.query(QUESTION)
        assert response.response == plain.response and "trustmargin" not in (
            response.metadata or {})
        streaming = TrustMarginQueryEngine(
            RetrieverQueryEngine.from_args(retriever, llm=llm, streaming=True), tm, llm=llm,
            shadow=shadow).query(QUESTION)
        assert "".join(streaming.response_gen) == plain.response
        assert shadow.flush(timeout=120)
    finally:
        root.event_handlers.remove(handler)
    records = lines(tmp_path / "shadow.jsonl")
    assert len(records) == 2 and len(handler.seen) == 2
    for record, decision in zip(records, handler.seen, strict=True):
        assert record["rag_answer"] == plain.response and record["served"] == "rag"
        assert record["decision"] == decision.model_dump(mode="json")
        assert record["passages"][0]["text"] == CORPUS[0].text


def test_flush_waits_for_the_queue(tmp_path: Path) -> None:
    shadow = Shadow()
    done: list[float] = []
    shadow.submit(lambda: (time.sleep(0.2), done.append(1.0)))  # type: ignore[func-returns-value]
    assert shadow.flush(timeout=0.01) is False and not done
    assert shadow.flush(timeout=10) and done == [1.0]
