"""LlamaIndex: the response's sources follow the kept side, the two sides are generated at
once, and a streaming engine streams the kept side as it came.

Real parts: LlamaIndex's RetrieverQueryEngine, SummaryIndex and instrumentation, the embedded
SmolLM2 model as scorer and LLM, a real BM25 index. The kept side is set with the rule's
threshold (``tau`` -100 keeps RAG, +100 Direct), so no test depends on how the scorer judges
two different answers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.query_engine import RetrieverQueryEngine

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.llama_index import (
    METADATA_KEY,
    SOURCES_KEY,
    LocalLlamaIndexLLM,
    PassageRetriever,
    TrustMarginQueryEngine,
    TrustMarginRetrieverQueryEngine,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Passage

QUESTION = "Which river flows through Quenby?"
CORPUS = [
    Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
    Passage(id="rivers", title="Rivers", text="A river flows downhill to the sea."),
]


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(CORPUS)


def arbiter(tm: TrustMargin, tau: float) -> TrustMargin:
    return TrustMargin(tm.backend, TrustMarginConfig(tau=tau, max_new_tokens=8))


@pytest.fixture(scope="module")
def keep_rag(tm: TrustMargin) -> TrustMargin:
    return arbiter(tm, -100.0)


@pytest.fixture(scope="module")
def keep_direct(tm: TrustMargin) -> TrustMargin:
    return arbiter(tm, 100.0)


@pytest.fixture(scope="module")
def llm(tm: TrustMargin) -> LocalLlamaIndexLLM:
    return LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=12)


def engine(index: BM25Index, tm: TrustMargin, llm: Any, *, streaming: bool = False,
           closed: Any = None) -> TrustMarginQueryEngine:
    inner = RetrieverQueryEngine.from_args(PassageRetriever(index, similarity_top_k=2),
                                           llm=llm, streaming=streaming)
    return TrustMarginQueryEngine(inner, tm, llm=closed or llm)


# -- sources follow the kept side -------------------------------------------------------------


@pytest.mark.slow
def test_the_sources_are_the_kept_answers(index: BM25Index, llm: LocalLlamaIndexLLM,
                                          keep_rag: TrustMargin,
                                          keep_direct: TrustMargin) -> None:
    weighed = [n.node.node_id for n in PassageRetriever(index, similarity_top_k=2)
               .retrieve(QUESTION)]
    rag = engine(index, keep_rag, llm).query(QUESTION)
    direct = engine(index, keep_direct, llm).query(QUESTION)
    assert rag.metadata[METADATA_KEY].source in ("rag", "agree")
    assert [n.node.node_id for n in rag.source_nodes] == weighed
    # The closed-book answer rests on no node: none is offered as its citation, and every
    # node weighed is listed in the metadata (JSON-safe).
    assert direct.metadata[METADATA_KEY].source == "direct"
    assert direct.source_nodes == []
    for response in (rag, direct):
        assert [n["id"] for n in response.metadata[SOURCES_KEY]] == weighed
        json.dumps(response.metadata)
    # The core pipeline as an engine follows the same rule.
    core = TrustMarginRetrieverQueryEngine(index, keep_direct, k=2).query(QUESTION)
    assert core.metadata[METADATA_KEY].source == "direct" and core.source_nodes == []
    assert [n["id"] for n in core.metadata[SOURCES_KEY]] == weighed


# -- both sides at once -----------------------------------------------------------------------


class TimedLLM(LocalLlamaIndexLLM):
    """The real local LLM, logging when each sync chat call starts and ends, by thread."""

    tag: str = "llm"
    log: Any = None  # shared list (Any: pydantic would copy a list)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.log.append((self.tag, "start", time.perf_counter(), threading.get_ident()))
        try:
            return super().chat(messages, **kwargs)
        finally:
            self.log.append((self.tag, "end", time.perf_counter(), threading.get_ident()))


def test_a_sync_query_generates_both_sides_at_once(index: BM25Index,
                                                   keep_rag: TrustMargin) -> None:
    log: list[tuple[str, str, float, int]] = []
    inner_llm = TimedLLM(backend=keep_rag.backend, max_new_tokens=12, tag="inner", log=log)
    closed_llm = TimedLLM(backend=keep_rag.backend, max_new_tokens=12, tag="closed", log=log)
    engine(index, keep_rag, inner_llm, closed=closed_llm).query(QUESTION)
    when = {(tag, what): at for tag, what, at, _ in log}
    assert len(log) == 4
    # Both calls were in flight together, from two threads: each started before the other
    # ended (the local model still runs one forward pass at a time; a remote LLM or engine
    # answers both at once).
    assert when["inner", "start"] < when["closed", "end"]
    assert when["closed", "start"] < when["inner", "end"]
    assert len({thread for *_, thread in log}) == 2


# -- a streaming engine streams the kept side -------------------------------------------------


@pytest.mark.slow
def test_a_streaming_engine_streams_the_kept_sides_pieces(
        index: BM25Index, llm: LocalLlamaIndexLLM, keep_rag: TrustMargin,
        keep_direct: TrustMargin) -> None:
    closed_pieces = [r.delta for r in llm.stream_complete(
        "Answer the question in a few words.\nQuestion: " + QUESTION)]
    assert len(closed_pieces) > 1
    for tm, side in ((keep_rag, "rag"), (keep_direct, "direct")):
        response = engine(index, tm, llm, streaming=True).query(QUESTION)
        assert isinstance(response, StreamingResponse)
        pieces = list(response.response_gen)
        decision = response.metadata[METADATA_KEY]
        assert decision.source in ((side, "agree") if side == "rag" else (side,))
        # The kept answer, in the pieces its side streamed (not one chunk at the end).
        assert "".join(pieces) == decision.answer and len(pieces) > 1

        async def run(tm: TrustMargin = tm) -> tuple[Any, list[str]]:
            streamed = await engine(index, tm, llm, streaming=True).aquery(QUESTION)
            return streamed, [p async for p in streamed.async_response_gen()]

        streamed, async_pieces = asyncio.run(run())
        assert isinstance(streamed, AsyncStreamingResponse)
        assert async_pieces == pieces
