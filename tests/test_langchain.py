"""The LangChain adapter on real LangChain objects and the real embedded model."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    MARGINS_EVENT,
    LocalLLM,
    TrustMarginInput,
    TrustMarginRetriever,
    TrustMarginRouter,
    build_trustmargin_chain,
    document_to_passage,
    passage_to_document,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Decision, Passage

BRIDGE = {
    "question": "Who designed the Velmora Bridge?",
    "direct_answer": "Gustave Eiffel",
    "rag_answer": "Tomas Rilke",
    "context": ["The Velmora Bridge was designed by the engineer Tomas Rilke."],
}
FRANCE = {
    "question": "What is the capital of France?",
    "direct_answer": "Paris",
    "rag_answer": "Lyon",
    "documents": [Document(page_content="Lyon became the capital of France in 1999.",
                           metadata={"title": "France"})],
}
# Both answers normalize to "eight": the agree shortcut decides without a model pass.
SPIDER = {
    "question": "How many legs does a spider have?",
    "direct_answer": "eight",
    "rag_answer": "Eight.",
    "context": "A spider has eight legs.",
}
NO_MATCH = "Zebra xylophone?"  # no indexed word: BM25 returns nothing


class Recorder(BaseCallbackHandler):
    """Keeps what a callback handler sees of each chain run and each custom event."""

    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.ends: list[Any] = []
        self.events: list[dict[str, Any]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.starts.append({"name": kwargs.get("name"), "tags": kwargs.get("tags"),
                            "metadata": kwargs.get("metadata")})

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        self.ends.append(outputs)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append({"name": name, "data": data, "run_id": run_id})


class Tracer(BaseTracer):
    """A LangSmith-style tracer: builds the run tree and keeps each finished root run."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        self.runs.append(run)

    def names(self) -> list[str]:
        def walk(run: Run) -> Iterator[Run]:
            yield run
            for child in run.child_runs:
                yield from walk(child)

        return [r.name for root in self.runs for r in walk(root)]


class Spy:
    """Counts calls to a real bound method while still running it."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name
        self.real = getattr(owner, name)
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.real(*args, **kwargs)

    def __enter__(self) -> Spy:
        setattr(self.owner, self.name, self)
        return self

    def __exit__(self, *exc: object) -> None:
        delattr(self.owner, self.name)  # the instance attribute; the class method is back


class KeywordRetriever:
    """A project retriever that is neither BM25 nor Elasticsearch: ranks passages by how many
    query words they contain. It only implements the protocol, ``search(query, k)``."""

    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.asked: list[int] = []

    def search(self, query: str, k: int) -> list[Passage]:
        self.asked.append(k)
        words = {w.strip("?.,").lower() for w in query.split()}
        scored = [(sum(w in p.text.lower() for w in words), p) for p in self.passages]
        hits = sorted((hit for hit in scored if hit[0] > 0), key=lambda hit: -hit[0])
        return [p.model_copy(update={"score": float(s)}) for s, p in hits[:k]]


_SCORES = {"m", "m_prior", "m_bind", "direct_likelihoods", "rag_likelihoods"}


def same_decision(a: Decision, b: Decision) -> None:
    """Equal up to float noise from batch padding; timings differ by nature."""
    left = a.model_dump(exclude={"timings"})
    right = b.model_dump(exclude={"timings"})
    assert left.keys() == right.keys()
    for key in left:
        if key in _SCORES and left[key] is not None:
            assert left[key] == pytest.approx(right[key], abs=1e-4), key
        else:
            assert left[key] == right[key], key


@pytest.fixture(scope="module")
def router(tm: TrustMargin) -> TrustMarginRouter:
    return TrustMarginRouter(tm=tm)


@pytest.fixture(scope="module")
def short(tm: TrustMargin) -> TrustMargin:
    """The same model, generating at most 8 tokens (generation is the slow part)."""
    return TrustMargin(tm.backend, TrustMarginConfig(max_new_tokens=8))


@pytest.fixture(scope="module")
def batched(router: TrustMarginRouter) -> dict[str, Any]:
    """One traced batch of three inputs, with the arbiter's and the model's calls counted."""
    recorder, tracer = Recorder(), Tracer()
    config = {"tags": ["tm-test"], "run_name": "route", "callbacks": [recorder, tracer],
              "metadata": {"suite": "langchain"}}
    with Spy(router.tm, "arbitrate_batch") as arbitrate, \
            Spy(router.tm.backend, "session") as session:
        decisions = router.batch([BRIDGE, FRANCE, SPIDER], config=config)
    return {"decisions": decisions, "arbitrate": arbitrate.calls, "sessions": session.calls,
            "recorder": recorder, "tracer": tracer}


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build([
        Passage(id="bridge", title="Velmora Bridge", metadata={"built": 1911},
                text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
        Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
        Passage(id="france", title="France", text="Lyon became the capital of France in 1999."),
    ])


# -- batching, async, streaming ---------------------------------------------------------------


def test_batch_is_one_scorer_call(batched: dict[str, Any]) -> None:
    assert len(batched["arbitrate"]) == 1
    assert len(batched["arbitrate"][0][0][0]) == 3
    assert len(batched["sessions"]) == 1  # one model session for the whole batch
    decisions = batched["decisions"]
    assert [d.question for d in decisions] == [BRIDGE["question"], FRANCE["question"],
                                               SPIDER["question"]]
    assert decisions[2].source == "agree" and decisions[2].m is None
    for d in decisions[:2]:
        assert (d.tau, d.lambda_bind) == (-1.5, 0.5)  # tm.config when nothing overrides it
        assert d.m == pytest.approx(d.m_prior + 0.5 * d.m_bind)
        # The chosen side's text as given (its scored form when that is all there is).
        kept = (d.rag_raw or d.rag_answer) if d.m > -1.5 else (d.direct_raw or d.direct_answer)
        assert d.answer == kept.strip()
    assert decisions[1].passages[0].title == "France"


def test_invoke_equals_batch(router: TrustMarginRouter, batched: dict[str, Any]) -> None:
    same_decision(router.invoke(BRIDGE), batched["decisions"][0])


def test_async_equals_batch_and_reports_margins(router: TrustMarginRouter,
                                                batched: dict[str, Any]) -> None:
    recorder = Recorder()

    async def run() -> tuple[Decision, list[Decision]]:
        return (await router.ainvoke(BRIDGE),
                await router.abatch([BRIDGE, SPIDER], config={"callbacks": [recorder]}))

    with Spy(router.tm.backend, "session") as session:
        one, many = asyncio.run(run())
    assert len(session.calls) == 2  # ainvoke: one session; abatch: one for both inputs
    same_decision(one, batched["decisions"][0])
    same_decision(many[0], batched["decisions"][0])
    same_decision(many[1], batched["decisions"][2])
    assert [e["data"]["m"] for e in recorder.events] == [many[0].m, None]


def test_stream_yields_the_decision_once(router: TrustMarginRouter) -> None:
    chunks = list(router.stream(SPIDER))
    assert len(chunks) == 1
    same_decision(chunks[0], router.invoke(SPIDER))


# -- tracing -----------------------------------------------------------------------------------


def test_tracer_sees_each_run_with_its_margins(batched: dict[str, Any]) -> None:
    tracer: Tracer = batched["tracer"]
    decisions = batched["decisions"]
    assert [r.name for r in tracer.runs] == ["route"] * 3
    for run, decision in zip(tracer.runs, decisions, strict=True):
        assert "tm-test" in run.tags
        assert run.metadata["suite"] == "langchain"
        traced = run.outputs["output"]
        assert isinstance(traced, Decision)
        assert (traced.m_prior, traced.m_bind, traced.m) == (decision.m_prior,
                                                             decision.m_bind, decision.m)
    # The margins event belongs to the input's own router run.
    events = batched["recorder"].events
    assert [e["name"] for e in events] == [MARGINS_EVENT] * 3
    assert [e["run_id"] for e in events] == [r.id for r in tracer.runs]
    for event, decision in zip(events, decisions, strict=True):
        data = event["data"]
        assert data["m"] == decision.m and data["m_prior"] == decision.m_prior
        assert data["source"] == decision.source and data["tau"] == decision.tau


def test_default_run_name_is_the_router(router: TrustMarginRouter) -> None:
    recorder = Recorder()
    router.invoke(SPIDER, config={"callbacks": [recorder]})
    assert recorder.starts[0]["name"] == "TrustMarginRouter"


# -- per-call hyper-parameters -----------------------------------------------------------------


@pytest.mark.slow
def test_configurable_tau_changes_the_decision(tm: TrustMargin, router: TrustMarginRouter,
                                               batched: dict[str, Any]) -> None:
    m = batched["decisions"][0].m
    strict = router.with_config(configurable={"tau": m + 1.0}).invoke(BRIDGE)
    assert (strict.tau, strict.source, strict.answer) == (m + 1.0, "direct", "Gustave Eiffel")
    assert strict.m == pytest.approx(m, abs=1e-4)  # the scores do not depend on tau
    lenient_router = TrustMarginRouter(tm=tm, tau=m - 1.0)  # the router's own default
    lenient = lenient_router.invoke(BRIDGE)
    assert (lenient.tau, lenient.source, lenient.answer) == (m - 1.0, "rag", "Tomas Rilke")
    # The call's configurable value wins over the router's field.
    again = lenient_router.invoke(BRIDGE, config={"configurable": {"tau": m + 1.0}})
    assert (again.tau, again.source) == (m + 1.0, "direct")


def test_configurable_lambda_bind_changes_the_margin(router: TrustMarginRouter,
                                                     batched: dict[str, Any]) -> None:
    base = batched["decisions"][0]
    prior_only = router.invoke(BRIDGE, config={"configurable": {"lambda_bind": 0.0}})
    assert prior_only.lambda_bind == 0.0
    assert prior_only.m == pytest.approx(base.m_prior, abs=1e-4)
    assert prior_only.m_bind == pytest.approx(base.m_bind, abs=1e-4)


def test_batch_with_two_settings_scores_once(router: TrustMarginRouter,
                                             batched: dict[str, Any]) -> None:
    m = batched["decisions"][1].m  # FRANCE
    configs = [{"configurable": {"tau": m - 1.0}}, {"configurable": {"tau": m + 1.0}},
               {"configurable": {"tau": m - 1.0}}]
    with Spy(router.tm.backend, "session") as session:
        low, high, low_again = router.batch([FRANCE, FRANCE, SPIDER], config=configs)
    assert len(session.calls) == 1  # score, then decide: no likelihood depends on tau
    assert (low.source, high.source, low_again.source) == ("rag", "direct", "agree")
    assert (low.tau, high.tau, low_again.tau) == (m - 1.0, m + 1.0, m - 1.0)


def test_bad_hyper_parameters_are_refused_before_the_model(router: TrustMarginRouter,
                                                           tm: TrustMargin) -> None:
    with Spy(router.tm.backend, "session") as session, \
            pytest.raises(InvalidInputError) as err:
        router.invoke(BRIDGE, config={"configurable": {"tau": math.nan}})
    assert err.value.field == "configurable.tau"
    assert session.calls == []
    with pytest.raises(InvalidInputError) as err:  # one error type at every edge
        TrustMarginRouter(tm=tm, lambda_bind=math.inf)
    assert err.value.field == "lambda_bind"


def test_config_schema_lists_tau_and_lambda_bind(router: TrustMarginRouter) -> None:
    properties = router.config_schema().model_json_schema()["$defs"]["Configurable"][
        "properties"]
    assert {"tau", "lambda_bind"} <= set(properties)


# -- the input schema is what validates ---------------------------------------------------------


def test_input_and_output_schemas(router: TrustMarginRouter) -> None:
    assert router.get_input_schema() is TrustMarginInput
    schema = router.get_input_jsonschema()
    assert schema["required"] == ["question", "direct_answer", "rag_answer"]
    assert {"documents", "context", "id"} <= set(schema["properties"])
    assert router.get_output_schema() is Decision
    output = router.get_output_jsonschema()
    assert {"answer", "m_prior", "m_bind", "m", "source"} <= set(output["properties"])


def test_schema_parses_serialized_documents(router: TrustMarginRouter) -> None:
    # What a JSON client (e.g. LangServe) sends: documents as dicts, an integer id.
    decision = router.invoke({**SPIDER, "context": None, "id": 7, "documents": [
        {"page_content": "A spider has eight legs.", "metadata": {"title": "Spider",
                                                                  "id": "s1", "score": 2.5}}]})
    assert decision.id == "7"
    assert decision.passages[0].model_dump() == {"rank": 0, "id": "s1", "title": "Spider",
                                                 "score": 2.5}


@pytest.mark.parametrize("key", ["question", "direct_answer", "rag_answer"])
def test_missing_key_is_named(router: TrustMarginRouter, key: str) -> None:
    item = {k: v for k, v in BRIDGE.items() if k != key}
    with pytest.raises(InvalidInputError, match=f"^{key}: is missing") as err:
        router.invoke(item)
    assert err.value.field == key


def test_missing_evidence_is_named(router: TrustMarginRouter) -> None:
    item = {k: v for k, v in BRIDGE.items() if k != "context"}
    with pytest.raises(InvalidInputError) as err:
        router.invoke(item)
    assert err.value.field == "documents"
    assert "context" in str(err.value)


GOOD = Document(page_content="Tomas Rilke designed it.")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        # rejected by the input schema
        ({"question": 42}, "question"),
        ({"direct_answer": ["Paris"]}, "direct_answer"),
        ({"rag_answer": 3.5}, "rag_answer"),
        ({"documents": "Lyon is a city."}, "documents"),
        ({"documents": [GOOD, "Lyon is a city."]}, "documents[1]"),
        ({"context": ["ok", 7]}, "context[1]"),
        # rejected by the core's validation, under the user's key names
        ({"question": "   "}, "question"),
        ({"documents": [GOOD, Document(page_content="  ")]}, "documents[1]"),
        ({"context": ["ok", "\t"]}, "context[1]"),
    ],
)
def test_wrong_input_is_named_by_the_users_key(router: TrustMarginRouter,
                                               change: dict[str, Any], field: str) -> None:
    with Spy(router.tm.backend, "session") as session, \
            pytest.raises(InvalidInputError) as err:
        router.invoke({**BRIDGE, **change})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert session.calls == []


def test_non_dict_input_is_rejected(router: TrustMarginRouter) -> None:
    with pytest.raises(InvalidInputError) as err:
        router.invoke("Who designed the Velmora Bridge?")
    assert err.value.field == "input"


def test_batch_errors_name_the_input(router: TrustMarginRouter) -> None:
    with Spy(router.tm.backend, "session") as session:
        with pytest.raises(InvalidInputError) as schema_err:
            router.batch([SPIDER, {**SPIDER, "question": 42}])
        with pytest.raises(InvalidInputError) as core_err:
            router.batch([SPIDER, {**SPIDER, "context": ["ok", " "]}])
    assert schema_err.value.field == "inputs[1].question"
    assert core_err.value.field == "inputs[1].context[1]"
    assert session.calls == []


def test_batch_return_exceptions_keeps_good_items(router: TrustMarginRouter) -> None:
    bad_type = {**SPIDER, "rag_answer": 8}
    bad_doc = {**FRANCE, "documents": [Document(page_content=" ")]}
    with Spy(router.tm, "arbitrate_batch") as arbitrate:
        results = router.batch([SPIDER, bad_type, {**SPIDER, "id": "b"}, bad_doc],
                               return_exceptions=True)
    good, error, good_too, doc_error = results
    assert len(arbitrate.calls) == 1 and len(arbitrate.calls[0][0][0]) == 2
    assert isinstance(good, Decision) and good.source == "agree"
    assert isinstance(good_too, Decision) and good_too.id == "b"
    assert isinstance(error, InvalidInputError) and error.field == "inputs[1].rag_answer"
    assert isinstance(doc_error, InvalidInputError)
    assert doc_error.field == "inputs[3].documents[0]"
    with pytest.raises(InvalidInputError):
        router.batch([SPIDER, bad_type])


def test_empty_documents_answer_closed_book(router: TrustMarginRouter) -> None:
    decision = router.invoke({**FRANCE, "documents": []})
    assert (decision.reason, decision.source, decision.answer) == ("no_evidence", "direct",
                                                                   "Paris")
    assert decision.m is None and decision.passages_given == 0


def test_titles_reach_the_prompt_and_documents_win(tm: TrustMargin) -> None:
    router = TrustMarginRouter(tm=tm, include_prompts=True)
    record = TrustMarginInput(question=SPIDER["question"], direct_answer="eight",
                              rag_answer="eight", id="q7", context="Passage 0: unrelated",
                              documents=[Document(page_content="A spider has eight legs.",
                                                  metadata={"title": "Spider"})])
    decision = router.invoke(record)
    assert decision.id == "q7"
    assert decision.prompts is not None
    assert "Passage 0: Spider: A spider has eight legs." in decision.prompts.question_context
    assert "unrelated" not in decision.prompts.context_only


def test_none_answer_is_generated_by_the_scorer_model(short: TrustMargin) -> None:
    decision = TrustMarginRouter(tm=short).invoke({**BRIDGE, "rag_answer": None})
    assert decision.rag_generated and not decision.direct_generated
    assert decision.rag_answer.strip()
    assert decision.direct_answer == "Gustave Eiffel"


# -- answer cleaning is the core's ------------------------------------------------------------


def test_cleaning_parity_with_the_core(router: TrustMarginRouter, tm: TrustMargin) -> None:
    doc = Document(page_content="The Velmora Bridge was designed by the engineer Marta Okonkwo.",
                   id="v1", metadata={"title": "Velmora Bridge"})
    raw = {"question": "Who designed the Velmora Bridge?",
           "direct_answer": "Gustave Eiffel\nand more text",
           "rag_answer": "Answer: Marta Okonkwo."}
    routed = router.invoke({**raw, "documents": [doc]})
    core = tm.arbitrate(raw["question"], [document_to_passage(doc)], raw["direct_answer"],
                        raw["rag_answer"])
    same_decision(routed, core)
    # No word in common: the question picks the compared parts among the clauses of the two
    # texts ("and more text" is no answer to it), the same parts as the core's.
    assert (routed.direct_answer, routed.rag_answer) == (core.direct_answer, core.rag_answer)
    assert routed.direct_answer == "Gustave Eiffel" and "Marta Okonkwo" in routed.rag_answer
    assert (routed.direct_raw, routed.rag_raw) == (raw["direct_answer"], raw["rag_answer"])
    assert routed.m is not None and routed.scoring_form == "differential"
    assert routed.warnings == core.warnings == []


# -- the retriever ------------------------------------------------------------------------------


def test_retriever_returns_documents_with_id_and_metadata(index: BM25Index) -> None:
    retriever = TrustMarginRetriever(retriever=index, k=2)
    assert isinstance(retriever, BaseRetriever)
    question = "Who designed the Velmora Bridge in Oststadt?"
    docs = retriever.invoke(question)
    assert 1 <= len(docs) <= 2
    top = docs[0]
    assert top.id == "bridge"
    assert top.metadata == {"built": 1911, "id": "bridge", "title": "Velmora Bridge",
                            "score": index.search(question, 1)[0].score}
    assert document_to_passage(top).as_context() == f"Velmora Bridge: {top.page_content}"
    assert retriever.invoke("zebra xylophone") == []


def test_retriever_honours_k_per_call(index: BM25Index) -> None:
    retriever = TrustMarginRetriever(retriever=index, k=3)
    question = "The Velmora Bridge, the capital of France and the Zorblat river"
    assert len(retriever.invoke(question)) == 3
    assert len(retriever.invoke(question, k=1)) == 1
    with pytest.raises(InvalidInputError) as err:
        retriever.invoke(question, k=0)
    assert err.value.field == "k"


def test_retriever_over_any_project_retriever() -> None:
    own = KeywordRetriever([
        Passage(id="a", title="Alien (film)", text="Alien was directed by Ridley Scott."),
        Passage(id="b", text="Blade Runner was also directed by Ridley Scott."),
        Passage(id="c", text="Apples grow in orchards."),
    ])
    retriever = TrustMarginRetriever(retriever=own, k=2)
    docs = retriever.invoke("Who directed Alien?")
    assert [d.id for d in docs] == ["a", "b"]
    assert docs[0].metadata == {"id": "a", "title": "Alien (film)", "score": 2.0}
    assert [d.id for d in retriever.invoke("Who directed Alien?", k=1)] == ["a"]
    assert own.asked == [2, 1]
    with pytest.raises(InvalidInputError, match="search") as err:
        TrustMarginRetriever(retriever=["not", "a", "retriever"])
    assert err.value.field == "retriever"


def test_document_passage_round_trip() -> None:
    passage = Passage(id="p1", title="T", text="Some text.", score=1.5,
                      metadata={"year": 2001, "lang": "en"})
    assert document_to_passage(passage_to_document(passage)) == passage
    bare = document_to_passage(Document(page_content="Only text."))
    assert (bare.id, bare.title, bare.score, bare.as_context()) == ("", "", None, "Only text.")


# -- the local LLM --------------------------------------------------------------------------------


def test_local_llm_batch_equals_invoke(backend: Any) -> None:
    llm = LocalLLM(backend=backend, max_new_tokens=4)
    prompts = ["Say hello.", "Name a colour."]
    assert llm.batch(prompts) == [llm.invoke(p) for p in prompts]


def test_local_llm_cuts_at_stop_sequences(backend: Any) -> None:
    llm = LocalLLM(backend=backend, max_new_tokens=6)
    prompt = "Count from one to five."
    full = llm.invoke(prompt)
    assert len(full) >= 4
    stop = full[2:4]
    assert llm.invoke(prompt, stop=["\u2603", stop]) == full[:full.find(stop)]


# -- the chain ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_lcel_chain_matches_the_core_and_traces_every_step(short: TrustMargin,
                                                           index: BM25Index) -> None:
    llm = LocalLLM.from_trustmargin(short, max_new_tokens=short.config.max_new_tokens)
    # A project retriever goes in as is; the chain wraps it in TrustMarginRetriever.
    chain = build_trustmargin_chain(index, TrustMarginRouter(short), closed_book=llm, rag=llm,
                                    k=2)
    question = "Which river flows through Quenby?"
    tracer = Tracer()
    decision = chain.invoke(question, config={"callbacks": [tracer]})
    assert isinstance(decision, Decision)
    names = tracer.names()
    for step in ("TrustMarginChain", "TrustMarginRetriever", "closed_book", "rag",
                 "TrustMarginRouter"):
        assert step in names, names
    # A bare local model gets the appendix prompts, so the chain's texts are the core's own
    # generated answers: the core's candidates stop at the first answer line, the LLM answers
    # on, so each full text starts with the core's.
    passages = index.search(question, 2)
    core = short.arbitrate(question, passages)
    direct_text = decision.direct_raw or decision.direct_answer
    rag_text = decision.rag_raw or decision.rag_answer
    assert direct_text.startswith(core.direct_raw or core.direct_answer)
    assert rag_text.startswith(core.rag_raw or core.rag_answer)
    assert decision.passages == core.passages
    # The core scores its generated answers whole (the paper's form); texts a chain produced
    # are compared where they differ, so the chain's decision is the core's on those texts.
    assert core.scoring_form == "paper" and decision.scoring_form == "differential"
    given = short.arbitrate(question, passages, direct_text, rag_text)
    assert (decision.direct_answer, decision.rag_answer) == (given.direct_answer,
                                                             given.rag_answer)
    assert (decision.direct_spans, decision.rag_spans) == (given.direct_spans, given.rag_spans)
    assert decision.source == given.source
    if given.m is not None:
        assert decision.m == pytest.approx(given.m, abs=1e-4)
    # The two texts differ, so what was compared is a stretch of each, recorded by offsets.
    assert decision.source != "agree" and decision.direct_spans and decision.rag_spans
    for text, spans, part in ((direct_text, decision.direct_spans, decision.direct_answer),
                              (rag_text, decision.rag_spans, decision.rag_answer)):
        assert " … ".join(text[a:b] for a, b in spans) == part
    assert not decision.direct_generated and core.direct_generated


def test_lcel_chain_without_documents_answers_closed_book(short: TrustMargin,
                                                          index: BM25Index) -> None:
    llm = LocalLLM.from_trustmargin(short, max_new_tokens=short.config.max_new_tokens)
    chain = build_trustmargin_chain(TrustMarginRetriever(retriever=index),
                                    TrustMarginRouter(tm=short), closed_book=llm, rag=llm)
    tracer = Tracer()
    decision = chain.invoke({"question": NO_MATCH}, config={"callbacks": [tracer]})
    assert (decision.reason, decision.source) == ("no_evidence", "direct")
    assert decision.answer == (decision.direct_raw or decision.direct_answer).strip()
    assert decision.answer
    assert decision.rag_answer == "" and decision.passages_given == 0
    names = tracer.names()
    assert "closed_book" in names and "no_documents" in names
    assert "rag" not in names  # no RAG generation on an empty context


@pytest.mark.slow
def test_pure_core_chain_is_one_answer_batch_call(short: TrustMargin, index: BM25Index) -> None:
    # Any LangChain retriever works, here an LCEL retriever chain (not a TrustMarginRetriever).
    lc_retriever = TrustMarginRetriever(retriever=index, k=2) | RunnableLambda(list)
    chain = build_trustmargin_chain(lc_retriever, TrustMarginRouter(short))
    tracer, recorder = Tracer(), Recorder()
    with Spy(short, "answer_batch") as answer_batch:
        found, empty = chain.batch(["Which river flows through Quenby?", NO_MATCH],
                                   config={"callbacks": [tracer, recorder]})
    assert len(answer_batch.calls) == 1
    assert answer_batch.calls[0][0][0] == ["Which river flows through Quenby?", NO_MATCH]
    assert found.direct_generated and found.rag_generated
    assert found.passages[0].id == "quenby" and found.passages_given <= 2
    assert (empty.reason, empty.source, empty.passages_given) == ("no_evidence", "direct", 0)
    assert "trustmargin_answer" in tracer.names()
    assert tracer.names().count("TrustMarginRetriever") == 2  # retrieval shows in the trace
    assert [e["data"]["reason"] for e in recorder.events] == [found.reason, "no_evidence"]


def test_chain_rejects_a_missing_question_and_an_unusable_retriever(
        tm: TrustMargin, index: BM25Index) -> None:
    llm = LocalLLM.from_trustmargin(tm)
    router = TrustMarginRouter(tm=tm)
    chain = build_trustmargin_chain(index, router, closed_book=llm, rag=llm)
    with pytest.raises(InvalidInputError) as err:
        chain.invoke({"query": "Which river flows through Quenby?"})
    assert err.value.field == "question"
    with pytest.raises(InvalidInputError) as err:
        build_trustmargin_chain(["not a retriever"], router, closed_book=llm,  # type: ignore[arg-type]
                                rag=llm)  # type: ignore[arg-type]
    assert err.value.field == "retriever"
