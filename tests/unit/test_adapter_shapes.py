"""The adapters' shapes on the scripted backend: real LangChain runnables and LlamaIndex
engines, their input keys, output types and async paths, with the kept side known from the
scripted margins (M = -0.25: RAG under the paper's tau -1.5, Direct at tau 0)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from llama_index.core import QueryBundle
from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import NodeWithScore, TextNode
from scripting import DIRECT, PASSAGE, QUESTION, RAG, Views, arbiter

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain.router import MARGINS_EVENT, TrustMarginRouter
from trustmargin_integrations.llama_index.arbiter import METADATA_KEY, TrustMarginArbiter
from trustmargin_integrations.llama_index.query_engine import TrustMarginQueryEngine
from trustmargin_integrations.schema import Decision

D = Views(question_only=-1.0, question_context=-3.0, context_only=-2.5)
R = Views(question_only=-2.0, question_context=-0.5, context_only=-1.5)


def router(**fields: Any) -> TrustMarginRouter:
    tm, _ = arbiter(D, R)
    return TrustMarginRouter(tm, **fields)


def given(**extra: Any) -> dict[str, Any]:
    """A router input: both answers given, the passage as a Document."""
    return {"question": QUESTION, "direct_answer": DIRECT, "rag_answer": RAG,
            "documents": [Document(page_content=PASSAGE, metadata={"id": "velmora"})],
            **extra}


def test_the_router_returns_the_decision() -> None:
    decision = router().invoke(given())
    assert isinstance(decision, Decision)
    assert (decision.answer, decision.m) == (RAG, -0.25)
    assert decision.passages[0].id == "velmora"


def test_answer_output_is_the_kept_text() -> None:
    out = router(output="answer").invoke(given())
    assert out == RAG
    assert router(output="answer").OutputType is str


def test_per_call_tau_changes_the_kept_side_not_the_scores() -> None:
    decision = router().with_config(configurable={"tau": 0.0}).invoke(given())
    assert (decision.answer, decision.tau, decision.m) == (DIRECT, 0.0, -0.25)


def test_a_none_answer_is_generated_by_the_scorer() -> None:
    decision = router().invoke(given(direct_answer=None, rag_answer=None))
    assert (decision.direct_generated, decision.rag_generated) == (True, True)
    assert decision.answer == RAG


def test_context_strings_stand_in_for_documents() -> None:
    decision = router().invoke({"question": QUESTION, "direct_answer": DIRECT,
                                "rag_answer": RAG, "context": PASSAGE})
    assert decision.passages_used == 1


def test_a_batch_returns_errors_in_place() -> None:
    out = router().batch([given(), {"question": QUESTION, "direct_answer": DIRECT}],
                         return_exceptions=True)
    assert isinstance(out[0], Decision) and out[0].answer == RAG
    assert isinstance(out[1], InvalidInputError)
    assert out[1].field == "inputs[1].rag_answer"


def test_a_bad_document_is_named_by_its_key() -> None:
    with pytest.raises(InvalidInputError) as err:
        router().invoke(given(documents=[Document(page_content=PASSAGE), 3]))
    assert err.value.field == "documents[1]"


def test_async_invoke_and_batch_decide_the_same() -> None:
    async def run() -> tuple[Any, list[Any]]:
        r = router()
        return await r.ainvoke(given()), await r.abatch([given(), given(id="b")])

    one, many = asyncio.run(run())
    assert one.answer == RAG
    assert [(d.id, d.answer) for d in many] == [(None, RAG), ("b", RAG)]


def test_the_margins_event_carries_the_margins() -> None:
    from langchain_core.callbacks import BaseCallbackHandler

    seen: list[tuple[str, Any]] = []

    class Events(BaseCallbackHandler):
        def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
            seen.append((name, data))

    router().invoke(given(), config={"callbacks": [Events()]})
    [(name, data)] = seen
    assert name == MARGINS_EVENT
    assert (data["m_prior"], data["m_bind"], data["m"], data["source"]) == (
        -1.0, 1.5, -0.25, "rag")


def test_the_router_as_a_tool_answers_in_text() -> None:
    tool = router().as_tool()
    text = tool.invoke(given())
    assert isinstance(text, str) and text.startswith(RAG)


NODE = NodeWithScore(node=TextNode(text=PASSAGE, id_="velmora"), score=2.5)


class FixedEngine(CustomQueryEngine):
    """A query engine that always answers RAG from the one passage."""

    def custom_query(self, query_str: str) -> Response:
        return Response(response=RAG, source_nodes=[NODE], metadata={"engine": "fixed"})


def test_the_llama_index_arbiter_returns_a_response_with_the_decision() -> None:
    tm, _ = arbiter(D, R)
    response = TrustMarginArbiter(tm).arbitrate(QUESTION, DIRECT, RAG, source_nodes=[NODE])
    assert isinstance(response, Response)
    assert response.response == RAG
    assert [n.node.node_id for n in response.source_nodes] == ["velmora"]
    record = response.metadata[METADATA_KEY]
    assert (record["m"], record.source) == (-0.25, "rag")


def test_the_llama_index_arbiter_keeps_direct_without_nodes() -> None:
    tm, _ = arbiter(D, R)
    response = TrustMarginArbiter(tm).arbitrate(QUESTION, DIRECT, RAG, source_nodes=[])
    assert response.response == DIRECT
    assert response.source_nodes == []
    assert response.metadata[METADATA_KEY]["reason"] == "no_evidence"


def test_the_async_arbiter_agrees_with_the_sync_one() -> None:
    tm, _ = arbiter(D, R)
    response = asyncio.run(TrustMarginArbiter(tm).aarbitrate(
        QueryBundle(QUESTION), DIRECT, Response(response=RAG, source_nodes=[NODE])))
    assert response.response == RAG


def test_the_query_engine_wrapper_generates_direct_and_keeps_the_inner_metadata() -> None:
    tm, backend = arbiter(D, R)
    engine = TrustMarginQueryEngine(FixedEngine(), tm)
    response = engine.query(QUESTION)
    assert response.response == RAG
    assert response.metadata["engine"] == "fixed"
    decision = response.metadata[METADATA_KEY]
    assert (decision["direct_generated"], decision["rag_generated"]) == (True, False)
    assert [p.view for p, _ in backend.generated] == ["question_only"]


def test_the_query_engine_wrapper_async_path() -> None:
    tm, _ = arbiter(D, R, tau=0.0)
    response = asyncio.run(TrustMarginQueryEngine(FixedEngine(), tm).aquery(QUESTION))
    assert response.response == DIRECT
    assert response.metadata[METADATA_KEY]["m"] == -0.25


def test_the_query_engine_refuses_a_blank_query_before_the_inner_engine() -> None:
    tm, backend = arbiter(D, R)
    with pytest.raises(InvalidInputError) as err:
        TrustMarginQueryEngine(FixedEngine(), tm).query("   ")
    assert err.value.field == "query"
    assert backend.generated == []
