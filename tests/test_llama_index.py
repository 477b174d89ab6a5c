"""The LlamaIndex adapter on real LlamaIndex objects and the real embedded model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index import (
    METADATA_KEY,
    BM25Retriever,
    LocalLLM,
    TrustMarginPostprocessor,
    TrustMarginQueryEngine,
    node_to_passage,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Decision, Passage

QUESTION = "Which river flows through Quenby?"


def node(node_id: str, text: str, **metadata: Any) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=text, metadata=metadata), score=1.0)


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build([
        Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
        Passage(id="bridge", title="Velmora Bridge",
                text="The Velmora Bridge was designed by the engineer Tomas Rilke.",
                metadata={"source": "atlas"}),
        Passage(id="rivers", title="Rivers", text="A river flows downhill to the sea."),
    ])


@pytest.fixture(scope="module")
def short_tm(tm: TrustMargin) -> TrustMargin:
    """The session model with short generations, to keep the engine tests quick."""
    return TrustMargin(tm.backend, TrustMarginConfig(max_new_tokens=8))


@pytest.fixture(scope="module")
def post(tm: TrustMargin) -> TrustMarginPostprocessor:
    return TrustMarginPostprocessor(tm)


# -- retriever and LLM ----------------------------------------------------------------------


def test_bm25_retriever_returns_scored_nodes(index: BM25Index) -> None:
    retriever = BM25Retriever(index, similarity_top_k=2)
    hits = retriever.retrieve("Who designed the Velmora Bridge?")
    assert 1 <= len(hits) <= 2
    top = hits[0]
    assert top.node.node_id == "bridge"
    assert top.score is not None and top.score > 0
    assert top.node.metadata == {"source": "atlas", "title": "Velmora Bridge"}
    # The LLM sees the title, not the other metadata; the scorer sees "title: text".
    llm_view = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "title: Velmora Bridge" in llm_view and "atlas" not in llm_view
    assert node_to_passage(top) == "Velmora Bridge: " + top.node.get_content(MetadataMode.NONE)
    with pytest.raises(InvalidInputError) as err:
        BM25Retriever(index, similarity_top_k=0)
    assert err.value.field == "similarity_top_k"


def test_local_llm_completes_with_the_backend(backend: Any) -> None:
    llm = LocalLLM(backend=backend, max_new_tokens=4)
    assert llm.metadata.model_name == backend.model_id
    assert llm.metadata.num_output == 4
    prompt = "Name a colour."
    text = llm.complete(prompt).text
    assert text == backend.generate([backend.render_prompt(prompt)], 4)[0]
    chunks = list(llm.stream_complete(prompt))
    assert [c.text for c in chunks] == [text]


# -- the postprocessor ----------------------------------------------------------------------


def test_postprocessor_returns_a_response_with_the_decision(
        post: TrustMarginPostprocessor) -> None:
    nodes = [node("n1", "The Velmora Bridge was designed by the engineer Tomas Rilke.",
                  title="Velmora Bridge")]
    result = post.postprocess("Who designed the Velmora Bridge?", "Gustave Eiffel",
                              "Tomas Rilke", source_nodes=nodes)
    assert isinstance(result, Response)
    decision = result.metadata[METADATA_KEY]
    assert isinstance(decision, Decision)
    assert result.response == decision.answer
    assert decision.m is not None
    assert decision.answer == ("Tomas Rilke" if decision.m > decision.tau else "Gustave Eiffel")
    assert result.source_nodes == nodes and result.source_nodes[0] is nodes[0]
    assert decision.passages_given == 1


def test_postprocessor_keeps_node_metadata_and_cleans_raw_answers(
        post: TrustMarginPostprocessor) -> None:
    nodes = [node("n7", "A spider has eight legs.", title="Spider", page=3)]
    rag = Response("Answer: Eight.\nQuestion: next", source_nodes=nodes,
                   metadata={"n7": {"title": "Spider", "page": 3}})
    direct = Response("eight")
    result = post.postprocess("How many legs does a spider have?", direct, rag)
    assert result.metadata is not None
    assert result.metadata["n7"] == {"title": "Spider", "page": 3}
    assert set(result.metadata) == {"n7", METADATA_KEY}
    decision = result.metadata[METADATA_KEY]
    assert decision.rag_answer == "Eight"  # first line, label and period removed
    assert decision.source == "agree"
    assert result.source_nodes[0].node.node_id == "n7"


def test_postprocessor_sync_and_async_agree(post: TrustMarginPostprocessor) -> None:
    nodes = [node("f", "Lyon became the capital of France in 1999.", title="France")]
    args = ("What is the capital of France?", "Paris", "Lyon")
    sync = post.postprocess(*args, source_nodes=nodes)
    via_async = asyncio.run(post.apostprocess(*args, source_nodes=nodes))
    a, b = sync.metadata[METADATA_KEY], via_async.metadata[METADATA_KEY]
    assert a.answer == b.answer and a.source == b.source
    assert a.m == pytest.approx(b.m, abs=1e-4)
    assert sync.response == via_async.response


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rag": Response("Tomas Rilke", source_nodes=[])}, "rag.source_nodes"),
        ({"rag": "Tomas Rilke"}, "rag.source_nodes"),
        ({"direct": 42}, "direct"),
        ({"rag": 42}, "rag"),
        ({"query": "   "}, "query"),
        ({"rag": Response("Tomas Rilke", source_nodes=[node("a", "Text.")],
                          metadata={METADATA_KEY: "earlier"})}, "rag.metadata['trustmargin']"),
    ],
)
def test_postprocessor_bad_input_names_the_field(post: TrustMarginPostprocessor,
                                                 kwargs: dict[str, Any], field: str) -> None:
    args = {"query": "Who designed it?", "direct": "Eiffel",
            "rag": Response("Tomas Rilke", source_nodes=[node("a", "Rilke built it.")])}
    args.update(kwargs)
    with pytest.raises(InvalidInputError) as err:
        post.postprocess(args["query"], args["direct"], args["rag"])
    assert err.value.field == field


# -- the query-engine wrapper ---------------------------------------------------------------


@pytest.fixture(scope="module")
def engines(short_tm: TrustMargin, index: BM25Index) -> dict[str, Any]:
    llm = LocalLLM.from_trustmargin(short_tm)
    retriever = BM25Retriever(index, similarity_top_k=2)
    inner = RetrieverQueryEngine.from_args(retriever, llm=llm)
    with_llm = TrustMarginQueryEngine(inner, short_tm, llm=llm)
    scorer_answers = TrustMarginQueryEngine(inner, short_tm)  # Direct answer from the scorer
    return {
        "retrieved": retriever.retrieve(QUESTION),
        "sync": with_llm.query(QUESTION),
        "async": asyncio.run(scorer_answers.aquery(QUESTION)),
    }


def test_query_engine_keeps_the_inner_source_nodes(engines: dict[str, Any]) -> None:
    response = engines["sync"]
    assert isinstance(response, Response)
    assert [n.node.node_id for n in response.source_nodes] == [
        n.node.node_id for n in engines["retrieved"]]
    assert [n.score for n in response.source_nodes] == pytest.approx(
        [n.score for n in engines["retrieved"]])
    # The synthesizer's per-node metadata survives next to the reserved key.
    assert response.metadata["quenby"] == {"title": "Quenby"}
    decision = response.metadata[METADATA_KEY]
    assert response.response == decision.answer
    assert not decision.rag_generated and not decision.direct_generated


def test_query_and_aquery_agree(engines: dict[str, Any]) -> None:
    sync, via_async = engines["sync"], engines["async"]
    a, b = sync.metadata[METADATA_KEY], via_async.metadata[METADATA_KEY]
    # The local LLM with the appendix prompt answers exactly as the scorer would.
    assert b.direct_generated and not a.direct_generated
    assert (a.direct_answer, a.rag_answer, a.source) == (b.direct_answer, b.rag_answer,
                                                         b.source)
    if a.m is not None:
        assert a.m == pytest.approx(b.m, abs=1e-4)
    assert sync.response == via_async.response
    assert [n.node.node_id for n in via_async.source_nodes] == [
        n.node.node_id for n in sync.source_nodes]


def test_query_engine_rejects_bad_arguments(tm: TrustMargin) -> None:
    with pytest.raises(InvalidInputError) as err:
        TrustMarginQueryEngine(object(), tm)  # type: ignore[arg-type]
    assert err.value.field == "query_engine"
    engine = RetrieverQueryEngine.from_args(
        BM25Retriever(BM25Index.build([Passage(id="x", text="Quenby")])),
        llm=LocalLLM(backend=tm.backend))
    with pytest.raises(InvalidInputError) as err:
        TrustMarginQueryEngine(engine, tm, closed_book_template="Answer this:")
    assert err.value.field == "closed_book_template"
