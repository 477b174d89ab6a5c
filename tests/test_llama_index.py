"""The LlamaIndex adapter on real LlamaIndex objects and the real embedded model.

The only stand-ins are two tiny deterministic LLMs for framework-internal calls that the 135M
model cannot make (a router's JSON selection, a sub-question generator's JSON plan); every
answer, closed-book call and score comes from the real model.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import llama_index.core.instrumentation as instrument
import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
)
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.llms import CustomLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import (
    RetrieverQueryEngine,
    RouterQueryEngine,
    SubQuestionQueryEngine,
)
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode
from llama_index.core.selectors import LLMSingleSelector
from llama_index.core.tools import QueryEngineTool
from pydantic import Field

from trustmargin_integrations import llama_index as adapter
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index import (
    CLOSED_BOOK_PROMPT_KEY,
    METADATA_KEY,
    SOURCES_KEY,
    DecisionRecord,
    LocalLlamaIndexLLM,
    PassageRetriever,
    TrustMarginArbiter,
    TrustMarginDecisionEvent,
    TrustMarginQueryEngine,
    TrustMarginRetrieverQueryEngine,
    node_to_passage,
    passage_to_node,
)
from trustmargin_integrations.llama_index.arbiter import chosen_text
from trustmargin_integrations.prompts import QUESTION_ONLY_TEMPLATE
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule.replay import replay
from trustmargin_integrations.schema import Decision, Passage

QUESTION = "Which river flows through Quenby?"
UNANSWERABLE = "Who painted the Zanfir mural?"  # shares no term with the corpus


def node(node_id: str, text: str, **metadata: Any) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=text, metadata=metadata), score=1.0)


@pytest.fixture(scope="module")
def index() -> BM25Index:
    index = BM25Index.build([
        Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
        Passage(id="bridge", title="Velmora Bridge",
                text="The Velmora Bridge was designed by the engineer Marta Okonkwo.",
                metadata={"source": "atlas"}),
        Passage(id="rivers", title="Rivers", text="A river flows downhill to the sea."),
    ])
    assert index.search(UNANSWERABLE, 3) == []  # the empty-retrieval tests rely on it
    return index


@pytest.fixture(scope="module")
def short_tm(tm: TrustMargin) -> TrustMargin:
    """The session model with short generations, to keep the engine tests quick."""
    return TrustMargin(tm.backend, TrustMarginConfig(max_new_tokens=8))


@pytest.fixture(scope="module")
def llm(short_tm: TrustMargin) -> LocalLlamaIndexLLM:
    return LocalLlamaIndexLLM.from_trustmargin(short_tm, max_new_tokens=8)


class DecisionEvents(BaseEventHandler):
    """Collects the TrustMargin decisions dispatched on LlamaIndex's instrumentation bus."""

    decisions: list[Decision] = Field(default_factory=list)
    span_ids: list[str | None] = Field(default_factory=list)

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, TrustMarginDecisionEvent):
            self.decisions.append(event.decision)
            self.span_ids.append(event.span_id)


@pytest.fixture
def events() -> Iterator[DecisionEvents]:
    handler = DecisionEvents()
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    yield handler
    root.event_handlers.remove(handler)


# -- retriever, nodes and LLM ---------------------------------------------------------------


class Catalogue:
    """A project retriever that is neither BM25 nor Elasticsearch: anything with search()."""

    def __init__(self, passages: list[Any]) -> None:
        self.passages = passages

    def search(self, query: str, k: int) -> list[Any]:
        words = set(query.lower().split())
        return [p for p in self.passages
                if not isinstance(p, Passage) or words & set(p.text.lower().split())][:k]


def test_passage_retriever_works_over_any_project_retriever(index: BM25Index) -> None:
    hits = PassageRetriever(index, similarity_top_k=2).retrieve("Who designed the Velmora Bridge?")
    assert 1 <= len(hits) <= 2
    top = hits[0]
    assert top.node.node_id == "bridge"
    assert top.score is not None and top.score > 0
    assert top.node.metadata == {"source": "atlas", "title": "Velmora Bridge"}
    # The LLM sees the title, not the other metadata; the scorer sees the core's context.
    llm_view = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "title: Velmora Bridge" in llm_view and "atlas" not in llm_view
    passage = node_to_passage(top)
    assert (passage.id, passage.title, passage.score) == ("bridge", "Velmora Bridge", top.score)
    assert passage.as_context() == index.search("Velmora Bridge", 1)[0].as_context()

    own = Catalogue([Passage(id="a", title="Alder", text="alder trees like wet soil"),
                     Passage(id="b", text="oak trees live long")])
    nodes = PassageRetriever(own, similarity_top_k=1).retrieve("Where do alder trees grow?")
    assert [(n.node.node_id, n.node.metadata["title"]) for n in nodes] == [("a", "Alder")]
    assert node_to_passage(passage_to_node(own.passages[1])).as_context() == "oak trees live long"

    with pytest.raises(InvalidInputError) as err:
        PassageRetriever(index, similarity_top_k=0)
    assert err.value.field == "similarity_top_k"
    with pytest.raises(InvalidInputError) as err:
        PassageRetriever(object())  # type: ignore[arg-type]
    assert err.value.field == "search"
    with pytest.raises(InvalidInputError) as err:  # hits are checked by the core
        PassageRetriever(Catalogue(["not a passage"])).retrieve("anything")
    assert err.value.field == "retriever.search(queries[0])[0]"


# -- the response-level arbiter -------------------------------------------------------------


def test_arbiter_is_not_a_node_postprocessor(tm: TrustMargin, index: BM25Index,
                                             llm: LocalLlamaIndexLLM) -> None:
    arbiter = TrustMarginArbiter(tm)
    assert not isinstance(arbiter, BaseNodePostprocessor)
    # The misuse the old name invited now fails where the engine is built, naming the fix.
    with pytest.raises(InvalidInputError) as err:
        RetrieverQueryEngine.from_args(PassageRetriever(index), llm=llm,
                                       node_postprocessors=[arbiter])
    assert err.value.field == "node_postprocessors"
    assert "TrustMarginQueryEngine" in err.value.fix
    # No class in the adapter is named like a node postprocessor without being one.
    for name, cls in inspect.getmembers(adapter, inspect.isclass):
        if name.endswith("Postprocessor"):
            assert issubclass(cls, BaseNodePostprocessor), name


def test_arbiter_cleans_like_the_core(tm: TrustMargin, events: DecisionEvents) -> None:
    question = "Who designed the Velmora Bridge?"
    nodes = [node("bridge", "The Velmora Bridge was designed by the engineer Marta Okonkwo.",
                  title="Velmora Bridge", page=3)]
    direct, rag = "Gustave Eiffel\nand more text", "Answer: Marta Okonkwo."
    result = TrustMarginArbiter(tm).arbitrate(
        question, Response(direct), Response(rag, source_nodes=nodes, metadata={"bridge": 1}))
    decision = result.metadata[METADATA_KEY]
    core = tm.arbitrate(question, [Passage(id="bridge", title="Velmora Bridge",
                                           text=nodes[0].node.get_content(), score=1.0)],
                        direct, rag)
    # No word in common: the question picks the compared parts among the clauses of the two
    # texts ("and more text" is no answer to it), the same parts as the core's.
    assert (decision.direct_answer, decision.rag_answer) == (core.direct_answer, core.rag_answer)
    assert decision.direct_answer == "Gustave Eiffel" and "Marta Okonkwo" in decision.rag_answer
    assert (decision.direct_raw, decision.rag_raw) == (direct, rag)
    assert decision.m is not None and decision.m == pytest.approx(core.m, abs=1e-6)
    assert decision.m_prior == pytest.approx(core.m_prior, abs=1e-6)
    assert (decision.answer, decision.source, decision.reason) == (core.answer, core.source,
                                                                   core.reason)
    assert decision.warnings == core.warnings == []
    assert decision.scoring_form == "differential"
    assert [(p.id, p.title, p.score) for p in decision.passages] == [
        ("bridge", "Velmora Bridge", 1.0)]
    # The chosen side's text as given, its sources (none for the closed-book answer), the
    # caller's metadata and two reserved keys: the Decision as a JSON dict that reads like the
    # Decision, and every node weighed.
    kept_rag = replay(core) == "rag"
    assert result.response == (rag if kept_rag else direct)
    assert result.source_nodes == (nodes if kept_rag else [])
    assert isinstance(decision, DecisionRecord)
    assert result.metadata == {"bridge": 1,
                               METADATA_KEY: decision.decision.model_dump(mode="json"),
                               SOURCES_KEY: [{"id": "bridge", "title": "Velmora Bridge",
                                              "score": 1.0}]}
    assert events.decisions == [decision.decision]


def test_arbiter_without_evidence_keeps_the_closed_book_answer(tm: TrustMargin) -> None:
    arbiter = TrustMarginArbiter(tm)
    result = arbiter.arbitrate("Who designed it?", "Gustave Eiffel.", "Tomas Rilke",
                               source_nodes=[])
    decision = result.metadata[METADATA_KEY]
    # The chosen side comes back as the chain gave it; the compared part is kept apart.
    assert (decision.reason, decision.source, decision.answer, result.response) == (
        "no_evidence", "direct", "Gustave Eiffel.", "Gustave Eiffel.")
    assert decision.direct_answer == "Gustave Eiffel"
    via_async = asyncio.run(arbiter.aarbitrate("Who designed it?", "Gustave Eiffel.",
                                               Response("Tomas Rilke")))
    assert via_async.metadata[METADATA_KEY].reason == "no_evidence"
    assert via_async.response == "Gustave Eiffel."


async def _stream(text: str) -> Any:
    yield text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"query": "   "}, "query"),
        ({"direct": 42}, "direct"),
        ({"rag": 42}, "rag"),
        ({"rag": AsyncStreamingResponse(_stream("Rilke"))}, "rag"),
        ({"rag": Response("Rilke", source_nodes=[TextNode(text="Rilke built it.")])},
         "rag.source_nodes[0]"),
        ({"rag": Response("Rilke", source_nodes=[node("a", "Fine."), node("b", "  ")])},
         "rag.source_nodes[1]"),
        ({"source_nodes": [node("a", "  ")]}, "source_nodes[0]"),
        ({"rag": Response("Rilke", source_nodes=[node("a", "Text.")],
                          metadata={METADATA_KEY: "earlier"})}, "rag.metadata['trustmargin']"),
    ],
)
def test_arbiter_bad_input_names_the_field(tm: TrustMargin, kwargs: dict[str, Any],
                                           field: str) -> None:
    args: dict[str, Any] = {"query": "Who designed it?", "direct": "Eiffel",
                            "rag": Response("Rilke", source_nodes=[node("a", "Rilke built it.")])}
    args.update(kwargs)
    with pytest.raises(InvalidInputError) as err:
        TrustMarginArbiter(tm).arbitrate(args.pop("query"), args.pop("direct"),
                                         args.pop("rag"), **args)
    assert err.value.field == field


# -- the query-engine wrapper ---------------------------------------------------------------


@pytest.mark.slow
def test_query_engine_keeps_nodes_and_dispatches_the_decision(
        short_tm: TrustMargin, index: BM25Index, llm: LocalLlamaIndexLLM,
        events: DecisionEvents) -> None:
    retriever = PassageRetriever(index, similarity_top_k=2)
    engine = TrustMarginQueryEngine(RetrieverQueryEngine.from_args(retriever, llm=llm),
                                    short_tm, llm=llm)
    response = engine.query(QUESTION)
    assert isinstance(response, Response)
    decision = response.metadata[METADATA_KEY]
    assert response.response == chosen_text(decision.decision)
    retrieved = retriever.retrieve(QUESTION)
    weighed = [(n.node.node_id, n.score) for n in retrieved]
    kept = [(n.node.node_id, n.score) for n in response.source_nodes]
    assert kept == (weighed if decision.decision.source != "direct" else [])
    assert [(n["id"], n["score"]) for n in response.metadata[SOURCES_KEY]] == weighed
    assert [p.id for p in decision.passages] == [n.node.node_id for n in retrieved]
    # The synthesizer's per-node metadata survives next to the reserved key.
    assert response.metadata["quenby"] == {"title": "Quenby"}
    assert not decision.rag_generated and not decision.direct_generated
    # The instrumentation bus carried the very Decision the response holds, inside a span.
    assert len(events.decisions) == 1 and events.decisions[0] is decision.decision
    assert events.span_ids[0] is not None


@pytest.mark.slow
def test_streaming_inner_engine_sync_and_async(short_tm: TrustMargin, index: BM25Index,
                                               llm: LocalLlamaIndexLLM) -> None:
    retriever = PassageRetriever(index, similarity_top_k=2)
    plain = RetrieverQueryEngine.from_args(retriever, llm=llm).query(QUESTION).response
    engine = TrustMarginQueryEngine(
        RetrieverQueryEngine.from_args(retriever, llm=llm, streaming=True), short_tm, llm=llm)

    sync = engine.query(QUESTION)
    assert isinstance(sync, StreamingResponse)
    decision = sync.metadata[METADATA_KEY]
    pieces = list(sync.response_gen)
    # The kept side's answer, in the pieces that side streamed (not one chunk).
    assert "".join(pieces) == chosen_text(decision.decision) and len(pieces) > 1

    async def run() -> tuple[Any, str]:
        response = await engine.aquery(QUESTION)
        return response, "".join([t async for t in response.async_response_gen()])

    via_async, text = asyncio.run(run())
    assert isinstance(via_async, AsyncStreamingResponse)
    assert chosen_text(via_async.metadata[METADATA_KEY].decision) == text
    for response in (sync, via_async):
        d = response.metadata[METADATA_KEY]
        # The stream was consumed: the RAG candidate is the inner engine's full answer.
        assert (d.rag_raw or d.rag_answer) == plain.strip()
        weighed = [n.node.node_id for n in retriever.retrieve(QUESTION)]
        assert [n["id"] for n in response.metadata[SOURCES_KEY]] == weighed
        assert [n.node.node_id for n in response.source_nodes] == (
            weighed if d.source != "direct" else [])
        assert d.passages_used == len(weighed) > 0


class TimedLLM(LocalLlamaIndexLLM):
    """The real local LLM, logging when each async chat call starts and ends (it is a chat
    model, so LlamaIndex sends it prompts as messages; the log keeps the last one)."""

    tag: str = "llm"
    log: Any = None  # a list shared by several LLMs (Any: pydantic would copy a list)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        prompt = messages[-1].content or ""
        self.log.append((self.tag, "start", prompt))
        try:
            return await super().achat(messages, **kwargs)
        finally:
            self.log.append((self.tag, "end", prompt))


@pytest.mark.slow
def test_aquery_runs_the_inner_engine_and_the_closed_book_call_concurrently(
        short_tm: TrustMargin, index: BM25Index) -> None:
    log: list[tuple[str, str, str]] = []
    inner_llm = TimedLLM(backend=short_tm.backend, max_new_tokens=8, tag="inner", log=log)
    closed_llm = TimedLLM(backend=short_tm.backend, max_new_tokens=8, tag="closed", log=log)
    inner = RetrieverQueryEngine.from_args(PassageRetriever(index, similarity_top_k=2),
                                           llm=inner_llm)
    engine = TrustMarginQueryEngine(inner, short_tm, llm=closed_llm)
    response = asyncio.run(engine.aquery(QUESTION))
    assert [(tag, when) for tag, when, _ in log[:2]] in (
        [("inner", "start"), ("closed", "start")], [("closed", "start"), ("inner", "start")])
    assert len(log) == 4  # one completion each
    assert response.metadata[METADATA_KEY].passages_used > 0


@pytest.mark.slow
def test_closed_book_prompt_round_trip(short_tm: TrustMargin, index: BM25Index) -> None:
    log: list[tuple[str, str, str]] = []
    closed_llm = TimedLLM(backend=short_tm.backend, max_new_tokens=8, tag="closed", log=log)
    inner = RetrieverQueryEngine.from_args(PassageRetriever(index, similarity_top_k=2),
                                           llm=LocalLlamaIndexLLM.from_trustmargin(short_tm))
    engine = TrustMarginQueryEngine(inner, short_tm, llm=closed_llm)
    prompts = engine.get_prompts()
    assert prompts[CLOSED_BOOK_PROMPT_KEY].format(question="Q?") == (
        QUESTION_ONLY_TEMPLATE.format(question="Q?"))
    assert "query_engine:response_synthesizer:text_qa_template" in prompts

    engine.update_prompts({CLOSED_BOOK_PROMPT_KEY: PromptTemplate(
        "Reply with one name.\nQuestion: {question}\nName:")})
    assert engine.get_prompts()[CLOSED_BOOK_PROMPT_KEY].format(question="Q?") == (
        "Reply with one name.\nQuestion: Q?\nName:")
    response = asyncio.run(engine.aquery(QUESTION))
    sent = [prompt for tag, when, prompt in log if when == "start"]
    assert sent == [f"Reply with one name.\nQuestion: {QUESTION}\nName:"]
    assert response.metadata[METADATA_KEY].direct_answer  # the new prompt's answer was used

    with pytest.raises(InvalidInputError) as err:
        engine.update_prompts({CLOSED_BOOK_PROMPT_KEY: PromptTemplate("{question} {extra}")})
    assert err.value.field == CLOSED_BOOK_PROMPT_KEY
    scorer_answers = TrustMarginQueryEngine(inner, short_tm)  # no LLM: the core's fixed prompt
    assert CLOSED_BOOK_PROMPT_KEY not in scorer_answers.get_prompts()
    with pytest.raises(InvalidInputError):
        scorer_answers.update_prompts({CLOSED_BOOK_PROMPT_KEY: PromptTemplate("{question}")})


class FixedReplyLLM(CustomLLM):
    """FAKE LLM, for framework-internal calls only: always replies ``reply``.

    A router's selector and a sub-question generator need JSON that the 135M model cannot
    write; these calls only steer LlamaIndex to the TrustMargin engine under test, whose
    answers still come from the real model.
    """

    reply: str

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="fixed-reply-fake")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return CompletionResponse(text=self.reply)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield CompletionResponse(text=self.reply, delta=self.reply)


@pytest.fixture(scope="module")
def no_evidence_engine(short_tm: TrustMargin, index: BM25Index,
                       llm: LocalLlamaIndexLLM) -> TrustMarginQueryEngine:
    inner = RetrieverQueryEngine.from_args(PassageRetriever(index, similarity_top_k=2), llm=llm)
    return TrustMarginQueryEngine(inner, short_tm, llm=llm)


def test_router_query_engine_answers_when_retrieval_finds_nothing(
        no_evidence_engine: TrustMarginQueryEngine, short_tm: TrustMargin, index: BM25Index,
        llm: LocalLlamaIndexLLM, events: DecisionEvents) -> None:
    tools = [
        QueryEngineTool.from_defaults(no_evidence_engine, name="atlas",
                                      description="Facts about places and buildings."),
        QueryEngineTool.from_defaults(TrustMarginRetrieverQueryEngine(index, short_tm),
                                      name="rivers", description="Facts about rivers."),
    ]
    selector = LLMSingleSelector.from_defaults(
        llm=FixedReplyLLM(reply='[{"choice": 1, "reason": "about a place"}]'))
    router = RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=llm)
    response = router.query(UNANSWERABLE)
    decision = response.metadata[METADATA_KEY]
    assert response.metadata["selector_result"].ind == 0
    assert (decision.reason, decision.source) == ("no_evidence", "direct")
    assert response.response == chosen_text(decision.decision) and decision.answer
    assert response.source_nodes == [] and decision.m is None
    assert events.decisions == [decision.decision]


def test_sub_question_engine_answers_when_retrieval_finds_nothing(
        no_evidence_engine: TrustMarginQueryEngine, llm: LocalLlamaIndexLLM,
        events: DecisionEvents) -> None:
    tool = QueryEngineTool.from_defaults(no_evidence_engine, name="atlas",
                                         description="Facts about places and buildings.")
    plan = f'```json\n[{{"sub_question": "{UNANSWERABLE}", "tool_name": "atlas"}}]\n```'
    engine = SubQuestionQueryEngine.from_defaults(
        query_engine_tools=[tool], llm=llm, verbose=False,
        question_gen=LLMQuestionGenerator.from_defaults(llm=FixedReplyLLM(reply=plan)))
    response = engine.query(f"{UNANSWERABLE} Answer briefly.")
    # A failing sub-question would be dropped silently (logged); the answer must be there.
    assert len(events.decisions) == 1
    decision = events.decisions[0]
    assert (decision.question, decision.reason) == (UNANSWERABLE, "no_evidence")
    texts = [n.node.get_content() for n in response.source_nodes]
    assert f"Sub question: {UNANSWERABLE}\nResponse: {chosen_text(decision)}" in texts
    assert response.response


# -- the core pipeline as a query engine ----------------------------------------------------


@pytest.mark.slow
def test_retriever_query_engine_is_the_core_pipeline(
        short_tm: TrustMargin, index: BM25Index, events: DecisionEvents) -> None:
    core = short_tm.answer(QUESTION, index, 2)
    over_project = TrustMarginRetrieverQueryEngine(index, short_tm, k=2).query(QUESTION)
    over_llama = asyncio.run(TrustMarginRetrieverQueryEngine(
        PassageRetriever(index, similarity_top_k=2), short_tm).aquery(QUESTION))
    for response in (over_project, over_llama):
        decision = response.metadata[METADATA_KEY]
        assert decision.direct_generated and decision.rag_generated
        assert (decision.answer, decision.direct_answer, decision.rag_answer) == (
            core.answer, core.direct_answer, core.rag_answer)
        if core.m is not None:
            assert decision.m == pytest.approx(core.m, abs=1e-4)
        assert decision.passages == core.passages
        used = [p.id for p in core.passages]
        assert [n["id"] for n in response.metadata[SOURCES_KEY]] == used
        assert [n.node.node_id for n in response.source_nodes] == (
            used if decision.source != "direct" else [])
        assert response.response == decision.answer
    assert events.decisions == [r.metadata[METADATA_KEY].decision
                                for r in (over_project, over_llama)]

    empty = TrustMarginRetrieverQueryEngine(index, short_tm).query(UNANSWERABLE)
    assert empty.metadata[METADATA_KEY].reason == "no_evidence"
    assert empty.response and empty.source_nodes == []


def test_engines_reject_bad_arguments(tm: TrustMargin, index: BM25Index) -> None:
    inner = RetrieverQueryEngine.from_args(PassageRetriever(index),
                                           llm=LocalLlamaIndexLLM(backend=tm.backend))
    cases: list[tuple[Any, str]] = [
        (lambda: TrustMarginQueryEngine(object(), tm), "query_engine"),  # type: ignore[arg-type]
        (lambda: TrustMarginQueryEngine(inner, tm, llm=LocalLlamaIndexLLM(backend=tm.backend),
                                        closed_book_prompt="Answer this:"),
         "closed_book_prompt"),
        (lambda: TrustMarginQueryEngine(inner, tm, closed_book_prompt="Q: {question}"),
         "closed_book_prompt"),
        (lambda: TrustMarginRetrieverQueryEngine(index, tm, k=0), "k"),
    ]
    for build, field in cases:
        with pytest.raises(InvalidInputError) as err:
            build()
        assert err.value.field == field
