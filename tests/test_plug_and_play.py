"""TrustMargin over multi-step pipelines, on real LangChain and LlamaIndex objects.

Everything runs on the real embedded model (the session's ``tm``/``backend``), a real BM25
index over the demo corpus, the project's real IRCoT pipeline and LlamaIndex's real
``FLAREInstructQueryEngine``; there are no stand-ins.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from llama_index.core.query_engine import FLAREInstructQueryEngine, RetrieverQueryEngine
from llama_index.core.query_engine.flare.answer_inserter import DirectLookaheadAnswerInserter
from llama_index.core.query_engine.flare.output_parser import (
    IsDoneOutputParser,
    QueryTaskOutputParser,
)

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.demo import demo_corpus
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    MARGINS_EVENT,
    PIPELINE_EVENT,
    PIPELINE_KEY,
    PIPELINES_KEY,
    PipelineRetriever,
    PipelineRunnable,
    TrustMarginRouter,
    build_pipeline_chain,
)
from trustmargin_integrations.langchain import LocalLLM as LangChainLLM
from trustmargin_integrations.llama_index import (
    METADATA_KEY,
    PIPELINE_METADATA_KEY,
    SOURCES_KEY,
    LocalLlamaIndexLLM,
    PassageRetriever,
    PipelineQueryEngine,
    SearchOrDoneOutputParser,
    SearchTagOutputParser,
    TrustMarginQueryEngine,
    build_flare_engine,
)
from trustmargin_integrations.pipelines import IRCoTPipeline, PipelineResult, build_pipeline
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule import SETTLED
from trustmargin_integrations.schema import Decision

pytestmark = pytest.mark.slow

# IRCoT's own retrievals for this question gather p02 (Marta Okonkwo's page), which is not
# among the question's top 3 (p00, p01, p07): the two evidence sets differ, so a test can
# tell which one was scored.
BRIDGE = "Who designed the Zelvora Bridge?"
YEAR = "In what year did the Zelvora Bridge open?"
CAPITAL = "What is the capital of Saint Orrel?"
K = 3


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(demo_corpus())


@pytest.fixture(scope="module")
def ircot(tm: TrustMargin, index: BM25Index) -> IRCoTPipeline:
    # Small budgets keep each run to a few seconds on CPU.
    pipeline = build_pipeline("ircot", tm.backend, index, k=2, max_steps=2,
                              sentence_max_new_tokens=24, max_new_tokens=12)
    assert isinstance(pipeline, IRCoTPipeline)
    return pipeline


@pytest.fixture(scope="module")
def router(tm: TrustMargin) -> TrustMarginRouter:
    return TrustMarginRouter(tm=tm)


@pytest.fixture(scope="module")
def ircot_runs(ircot: IRCoTPipeline) -> dict[str, PipelineResult]:
    """The pipeline's own results, run once directly (greedy decoding: deterministic)."""
    return {q: ircot.run(q) for q in (BRIDGE, YEAR)}


@pytest.fixture(scope="module")
def llm(tm: TrustMargin) -> LocalLlamaIndexLLM:
    return LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=24)


@pytest.fixture(scope="module")
def flare(llm: LocalLlamaIndexLLM, index: BM25Index) -> FLAREInstructQueryEngine:
    inner = RetrieverQueryEngine.from_args(PassageRetriever(index, similarity_top_k=K), llm=llm)
    return build_flare_engine(inner, llm, max_iterations=2)


def ids(passages: Any) -> list[str | None]:
    return [p.id for p in passages]


def without_seconds(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace without its wall-clock time (the one field two equal runs differ in)."""
    return {key: value for key, value in trace.items() if key != "seconds"}


def rag_text_is(decision: Decision, text: str) -> None:
    """The RAG side is ``text`` whole (a given text is never cut); what of it was compared
    with Direct is a stretch of it, recorded by its offsets."""
    assert (decision.rag_raw or decision.rag_answer) == text.strip()
    if decision.rag_spans:
        assert " … ".join(text.strip()[a:b] for a, b in decision.rag_spans) == \
            decision.rag_answer


def scored_or_settled(decision: Decision) -> None:
    """Margins were computed, or the outcome was settled before scoring, for a reason."""
    if decision.reason in SETTLED:
        assert decision.m is None
    else:
        assert decision.m is not None and math.isfinite(decision.m)
        assert decision.m == pytest.approx(decision.m_prior + decision.lambda_bind
                                           * decision.m_bind)


# -- LangChain ----------------------------------------------------------------------------------


def test_chain_scores_the_pipeline_answer_against_the_question_top_k(
        tm: TrustMargin, index: BM25Index, ircot: IRCoTPipeline, router: TrustMarginRouter,
        ircot_runs: dict[str, PipelineResult]) -> None:
    chain = build_pipeline_chain(ircot, router, k=K)
    decision = chain.invoke(BRIDGE)
    run = ircot_runs[BRIDGE]
    # The RAG side is the pipeline's answer, compared with Direct where the two differ.
    rag_text_is(decision, run.answer)
    assert not decision.rag_generated and decision.direct_generated
    # Scored against the question's own top-k, not the passages IRCoT gathered.
    top = ids(index.search(BRIDGE, K))
    assert ids(decision.passages) == top
    assert ids(run.passages) != top
    scored_or_settled(decision)
    # The same numbers as the core given the pipeline's answer over the question's passages
    # (the core generates Direct itself, as the chain's bare model did).
    again = tm.arbitrate(BRIDGE, index.search(BRIDGE, K), rag_answer=run.answer)
    assert (again.direct_answer, again.rag_answer) == (decision.direct_answer,
                                                       decision.rag_answer)
    assert (again.source, again.reason) == (decision.source, decision.reason)
    if decision.m is not None:
        assert decision.m == pytest.approx(again.m, abs=1e-4)
    # The pipeline's trace is in the audit record.
    trace = decision.metadata[PIPELINE_KEY]
    assert without_seconds(trace) == without_seconds(run.to_metadata())
    assert trace["pipeline"] == "ircot"
    assert {"retrieve", "reason"} <= {step["kind"] for step in trace["steps"]}
    assert Decision.model_validate_json(decision.model_dump_json()) == decision


def test_chain_invoke_and_batch_agree(ircot: IRCoTPipeline, router: TrustMarginRouter) -> None:
    chain = build_pipeline_chain(ircot, router, k=K)
    questions = [BRIDGE, {"question": YEAR}]
    one = [chain.invoke(q) for q in questions]
    many = chain.batch(questions)
    for a, b in zip(one, many, strict=True):
        assert (a.answer, a.source, a.reason) == (b.answer, b.source, b.reason)
        assert (a.direct_answer, a.rag_answer) == (b.direct_answer, b.rag_answer)
        assert ids(a.passages) == ids(b.passages)
        for key in ("m_prior", "m_bind", "m"):
            left, right = getattr(a, key), getattr(b, key)
            assert (left is None) == (right is None)
            if left is not None:
                # Batches pad prompts: equal up to float noise.
                assert left == pytest.approx(right, abs=1e-3)
        assert without_seconds(a.metadata[PIPELINE_KEY]) == \
            without_seconds(b.metadata[PIPELINE_KEY])


def test_chain_with_several_candidates(tm: TrustMargin, index: BM25Index, ircot: IRCoTPipeline,
                                       router: TrustMarginRouter,
                                       ircot_runs: dict[str, PipelineResult]) -> None:
    bm25 = LangChainLLM.from_trustmargin(tm, max_new_tokens=tm.config.max_new_tokens)
    chain = build_pipeline_chain({"bm25": bm25, "ircot": ircot}, router, retriever=index, k=K)
    decision = chain.invoke(YEAR)
    assert [c.name for c in decision.rag_candidates] == ["bm25", "ircot"]
    by_name = {c.name: c for c in decision.rag_candidates}
    # A bare model is BM25-RAG: the core's own RAG answer over the question's top-k (the
    # core's generation stops at the first answer line, the LLM answers on). Each text is kept
    # whole; what of it was compared with Direct is the candidate's answer.
    core = tm.answer(YEAR, index, K)
    assert (by_name["bm25"].raw or by_name["bm25"].answer).startswith(
        core.rag_raw or core.rag_answer)
    assert (by_name["ircot"].raw or by_name["ircot"].answer) == \
        ircot_runs[YEAR].answer.strip()
    assert ids(decision.passages) == ids(index.search(YEAR, K))
    # Only pipelines have traces.
    assert list(decision.metadata[PIPELINES_KEY]) == ["ircot"]
    assert without_seconds(decision.metadata[PIPELINES_KEY]["ircot"]) == \
        without_seconds(ircot_runs[YEAR].to_metadata())
    if decision.source == "direct":
        assert decision.winner is None
        assert decision.answer == (decision.direct_raw or decision.direct_answer).strip()
    else:
        assert decision.winner is not None
        kept = decision.rag_candidates[decision.winner]
        assert decision.answer == (kept.raw or kept.answer).strip()


class Recorder(BaseCallbackHandler):
    """Keeps the run names and custom events a callback handler sees."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.events: list[tuple[str, Any, UUID]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.names.append(str(kwargs.get("name")))

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append((name, data, run_id))


def test_chain_honours_callbacks(ircot: IRCoTPipeline, router: TrustMarginRouter,
                                 ircot_runs: dict[str, PipelineResult]) -> None:
    recorder = Recorder()
    chain = build_pipeline_chain(ircot, router, k=K)
    decision = chain.invoke(BRIDGE, config={"callbacks": [recorder], "tags": ["multi-step"]})
    assert {"TrustMarginPipelineChain", "ircot", "router_input"} <= set(recorder.names)
    events = {name: data for name, data, _ in recorder.events}
    assert without_seconds(events[PIPELINE_EVENT]) == \
        without_seconds(ircot_runs[BRIDGE].to_metadata())
    assert events[MARGINS_EVENT]["source"] == decision.source


def test_pipeline_runnable_and_retriever(ircot: IRCoTPipeline,
                                         ircot_runs: dict[str, PipelineResult]) -> None:
    runnable = PipelineRunnable(ircot)
    result = runnable.invoke(BRIDGE)
    assert isinstance(result, PipelineResult)
    assert without_seconds(result.to_metadata()) == \
        without_seconds(ircot_runs[BRIDGE].to_metadata())
    results = runnable.batch([BRIDGE, "   ", {"question": YEAR}], return_exceptions=True)
    assert isinstance(results[1], InvalidInputError)
    assert results[1].field == "inputs[1].question"
    assert [r.answer for r in (results[0], results[2])] == \
        [ircot_runs[BRIDGE].answer, ircot_runs[YEAR].answer]
    again = asyncio.run(runnable.abatch([YEAR]))
    assert again[0].answer == ircot_runs[YEAR].answer

    docs = PipelineRetriever(ircot).invoke(BRIDGE)
    assert [d.id for d in docs] == ids(ircot_runs[BRIDGE].passages)
    assert {d.metadata["pipeline"] for d in docs} == {"ircot"}


@pytest.mark.parametrize(("call", "field"), [
    (lambda c: c.invoke({"q": BRIDGE}), "question"),
    (lambda c: c.invoke("  "), "question"),
    (lambda c: c.invoke(42), "question"),
])
def test_chain_bad_questions_name_the_field(ircot: IRCoTPipeline, router: TrustMarginRouter,
                                            call: Any, field: str) -> None:
    chain = build_pipeline_chain(ircot, router, k=K)
    with pytest.raises(InvalidInputError) as err:
        call(chain)
    assert err.value.field == field


def test_chain_bad_construction_names_the_field(tm: TrustMargin, index: BM25Index,
                                                ircot: IRCoTPipeline,
                                                router: TrustMarginRouter) -> None:
    bm25 = LangChainLLM.from_trustmargin(tm, max_new_tokens=tm.config.max_new_tokens)
    cases = [
        (lambda: build_pipeline_chain(object(), router), "pipeline"),
        (lambda: build_pipeline_chain({}, router, retriever=index), "pipeline"),
        (lambda: build_pipeline_chain({"bm25": bm25, "x": object()}, router, retriever=index),
         "pipeline['x']"),
        (lambda: build_pipeline_chain({"bm25": bm25}, router), "retriever"),
        (lambda: build_pipeline_chain(ircot, router, k=0), "k"),
        (lambda: PipelineRunnable(index), "pipeline"),
        (lambda: PipelineRetriever("ircot"), "pipeline"),
    ]
    for build, field in cases:
        with pytest.raises(InvalidInputError) as err:
            build()
        assert err.value.field == field


def test_router_takes_rag_candidates_and_metadata(router: TrustMarginRouter) -> None:
    item = {"question": BRIDGE, "direct_answer": "Gustave Eiffel", "rag_answer": None,
            "rag_candidates": {"bm25": "Marta Okonkwo", "ircot": "Gustave Eiffel"},
            "context": ["The Zelvora Bridge was designed by Marta Okonkwo in 1987."],
            "metadata": {"trace": [1, 2]}}
    decision = router.invoke(item)
    assert [c.name for c in decision.rag_candidates] == ["bm25", "ircot"]
    assert decision.metadata == {"trace": [1, 2]}
    for bad, field in [({**item, "rag_candidates": 5}, "rag_candidates"),
                       ({**item, "rag_answer": "Marta Okonkwo"}, "rag_candidates"),
                       ({**item, "metadata": {"x": object()}}, "metadata")]:
        with pytest.raises(InvalidInputError) as err:
            router.invoke(bad)
        assert err.value.field == field


# -- LlamaIndex ---------------------------------------------------------------------------------


def test_flare_wrapping_scores_against_the_question_top_k(
        tm: TrustMargin, index: BM25Index, flare: FLAREInstructQueryEngine) -> None:
    assert isinstance(flare, FLAREInstructQueryEngine)
    raw = flare.query(BRIDGE)  # FLARE alone, for comparison (greedy: deterministic)
    engine = TrustMarginQueryEngine(flare, tm, evidence="retriever", trace=True)
    response = engine.query(BRIDGE)
    decision = response.metadata[METADATA_KEY].decision
    assert isinstance(decision, Decision)
    scored_or_settled(decision)
    rag_text_is(decision, raw.response or "")
    # The evidence is the question's top-k through FLARE's own retriever, whatever FLARE found.
    top = ids(index.search(BRIDGE, K))
    assert ids(decision.passages) == top
    assert [n["id"] for n in response.metadata[SOURCES_KEY]] == top
    assert [n.node.node_id for n in response.source_nodes] == (
        top if decision.source != "direct" else [])  # the kept answer's sources
    # What FLARE did is in the audit record: its answer, its nodes, its look-ahead calls.
    inner = decision.metadata["query_engine"]
    assert inner["engine"] == "FLAREInstructQueryEngine"
    assert inner["answer"] == raw.response
    assert [n["id"] for n in inner["source_nodes"]] == [n.node.node_id for n in raw.source_nodes]
    assert inner["evidence"] == "retriever"
    lookaheads = [s for s in inner["trace"] if s["event"] == "llm_predict"
                  and "existing_answer" in s["args"]]
    assert lookaheads and lookaheads[0]["args"] == {"query_str": BRIDGE, "existing_answer": ""}
    assert all(isinstance(s["output"], str) for s in lookaheads)
    assert inner["trace"][-1]["event"] == "query"
    assert inner["trace"][-1]["query"] == BRIDGE
    assert Decision.model_validate_json(decision.model_dump_json()) == decision


def test_flare_evidence_modes(tm: TrustMargin, index: BM25Index,
                              flare: FLAREInstructQueryEngine, llm: LocalLlamaIndexLLM) -> None:
    raw = flare.query(CAPITAL)
    own = [n.node.node_id for n in raw.source_nodes]
    plain = TrustMarginQueryEngine(flare, tm).query(CAPITAL).metadata[METADATA_KEY]
    fallback = TrustMarginQueryEngine(flare, tm, evidence="response_or_retriever",
                                      retriever=index, k=2)
    decision = fallback.query(CAPITAL).metadata[METADATA_KEY]
    if own:  # FLARE searched: both score its own nodes
        assert ids(plain.passages) == own[:plain.passages_used]
        assert decision.metadata["query_engine"]["evidence"] == "response"
    else:  # FLARE did not search: no evidence by default, the question's top-k on fallback
        assert plain.reason == "no_evidence" and plain.metadata == {}
        assert decision.metadata["query_engine"]["evidence"] == "retriever"
        assert ids(decision.passages) == ids(index.search(CAPITAL, 2))
    # Async, with a closed-book LLM running concurrently: its call is not in FLARE's trace.
    engine = TrustMarginQueryEngine(flare, tm, llm=llm, evidence="retriever", trace=True)
    response = asyncio.run(engine.aquery(CAPITAL))
    trace = response.metadata[METADATA_KEY].metadata["query_engine"]["trace"]
    assert trace and all(s["args"] != {"question": CAPITAL} for s in trace
                         if s["event"] == "llm_predict")
    assert response.metadata[METADATA_KEY].direct_answer  # the closed-book LLM did answer


def test_flare_parts_for_a_small_model(flare: FLAREInstructQueryEngine) -> None:
    modules = flare._get_prompt_modules()  # FLARE exposes its inserter only this way
    assert isinstance(modules["lookahead_answer_inserter"], DirectLookaheadAnswerInserter)
    text = "It was designed by the [Zelvora Bridge Design] company."
    with pytest.raises(IndexError):
        QueryTaskOutputParser().parse(text)  # the stock parser fails on a stray bracket
    assert SearchTagOutputParser().parse(text) == []
    tagged = "Red is for [Search(What does red (the colour) mean?)], green for forests."
    [task] = SearchTagOutputParser().parse(tagged)
    assert task.query_str == "What does red (the colour) mean?"
    assert tagged[task.start_idx:task.end_idx + 1] == \
        "[Search(What does red (the colour) mean?)]"
    strict = SearchOrDoneOutputParser(stop_without_search=False)
    assert IsDoneOutputParser().parse("It is in Donetsk.")[0]  # the stock substring match
    assert strict.parse("It is in Donetsk.") == (False, "It is in Donetsk.")
    assert strict.parse("Marta Okonkwo. done") == (True, "Marta Okonkwo.")
    assert strict.parse("[Search(who?)] done")[0] is False
    assert SearchOrDoneOutputParser().parse(" Marta Okonkwo. ") == (True, "Marta Okonkwo.")


def test_pipeline_query_engine_under_trustmargin(
        tm: TrustMargin, index: BM25Index, ircot: IRCoTPipeline,
        ircot_runs: dict[str, PipelineResult]) -> None:
    run = ircot_runs[BRIDGE]
    engine = TrustMarginQueryEngine(PipelineQueryEngine(ircot), tm)
    response = engine.query(BRIDGE)
    decision = response.metadata[METADATA_KEY]
    scored_or_settled(decision)
    rag_text_is(decision, run.answer)
    # By default the evidence is what the pipeline gathered...
    assert ids(decision.passages) == ids(run.passages)[:decision.passages_used]
    assert without_seconds(decision.metadata[PIPELINE_METADATA_KEY]) == \
        without_seconds(run.to_metadata())
    assert "query_engine" not in decision.metadata
    # ...and with evidence="retriever", the question's top-k, as in the paper.
    paper = TrustMarginQueryEngine(PipelineQueryEngine(ircot), tm, evidence="retriever",
                                   retriever=index, k=K)
    decision = paper.query(BRIDGE).metadata[METADATA_KEY]
    assert ids(decision.passages) == ids(index.search(BRIDGE, K))
    rag_text_is(decision, run.answer)
    assert decision.metadata["query_engine"]["source_nodes"] == [
        {"id": p.id, "title": p.title, "score": p.score} for p in run.passages]


def test_llama_index_bad_inputs_name_the_field(tm: TrustMargin, index: BM25Index,
                                               ircot: IRCoTPipeline,
                                               flare: FLAREInstructQueryEngine) -> None:
    cases = [
        (lambda: TrustMarginQueryEngine(flare, tm, evidence="nodes"), "evidence"),
        (lambda: TrustMarginQueryEngine(flare, tm, retriever=index), "retriever"),
        (lambda: TrustMarginQueryEngine(flare, tm, k=3), "k"),
        (lambda: TrustMarginQueryEngine(flare, tm, evidence="retriever", retriever=object()),
         "retriever"),
        (lambda: TrustMarginQueryEngine(flare, tm, evidence="retriever", k=0), "k"),
        (lambda: PipelineQueryEngine(object()), "pipeline"),
        (lambda: PipelineQueryEngine(ircot).query("   "), "query"),
    ]
    for build, field in cases:
        with pytest.raises(InvalidInputError) as err:
            build()
        assert err.value.field == field
    # A pipeline engine cannot retrieve by itself: the retriever must be given.
    engine = TrustMarginQueryEngine(PipelineQueryEngine(ircot), tm, evidence="retriever")
    with pytest.raises(InvalidInputError) as err:
        engine.query(BRIDGE)
    assert err.value.field == "retriever"
