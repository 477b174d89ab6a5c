"""The LangChain adapter on real LangChain objects and the real embedded model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    BM25Retriever,
    LocalLLM,
    TrustMarginInput,
    TrustMarginRouter,
    build_trustmargin_chain,
    document_to_passage,
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


class Recorder(BaseCallbackHandler):
    """Keeps what a tracer would see of each chain run."""

    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.ends: list[Any] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.starts.append({"name": kwargs.get("name"), "tags": kwargs.get("tags"),
                            "metadata": kwargs.get("metadata")})

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        self.ends.append(outputs)


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
def batched(router: TrustMarginRouter) -> dict[str, Any]:
    """One traced batch of three inputs, with the scorer's calls counted."""
    recorder = Recorder()
    config = {"tags": ["tm-test"], "run_name": "route", "callbacks": [recorder],
              "metadata": {"suite": "langchain"}}
    with Spy(router.tm.backend, "run_jobs") as spy:
        decisions = router.batch([BRIDGE, FRANCE, SPIDER], config=config)
    return {"decisions": decisions, "calls": spy.calls, "recorder": recorder}


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build([
        Passage(id="bridge", title="Velmora Bridge",
                text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
        Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
        Passage(id="france", title="France", text="Lyon became the capital of France in 1999."),
    ])


# -- batching, async, streaming, tracing --------------------------------------------------


def test_batch_is_one_scorer_call(batched: dict[str, Any]) -> None:
    assert len(batched["calls"]) == 1
    jobs = batched["calls"][0][0][0]
    assert len(jobs) == 3
    decisions = batched["decisions"]
    assert [d.question for d in decisions] == [BRIDGE["question"], FRANCE["question"],
                                               SPIDER["question"]]
    assert decisions[2].source == "agree" and decisions[2].m is None
    for d in decisions[:2]:
        assert d.m == pytest.approx(d.m_prior + 0.5 * d.m_bind)
        assert d.answer == (d.rag_answer if d.m > -1.5 else d.direct_answer)


def test_invoke_equals_batch(router: TrustMarginRouter, batched: dict[str, Any]) -> None:
    for item, from_batch in zip([BRIDGE, FRANCE], batched["decisions"], strict=False):
        same_decision(router.invoke(item), from_batch)


def test_async_equals_batch(router: TrustMarginRouter, batched: dict[str, Any]) -> None:
    async def run() -> tuple[Decision, list[Decision]]:
        return await router.ainvoke(BRIDGE), await router.abatch([BRIDGE, FRANCE, SPIDER])

    with Spy(router.tm.backend, "run_jobs") as spy:
        one, many = asyncio.run(run())
    assert len(spy.calls) == 2  # ainvoke: one call; abatch: one call for all three
    same_decision(one, batched["decisions"][0])
    for a, b in zip(many, batched["decisions"], strict=True):
        same_decision(a, b)


def test_stream_yields_the_decision_once(router: TrustMarginRouter) -> None:
    chunks = list(router.stream(SPIDER))
    assert len(chunks) == 1
    same_decision(chunks[0], router.invoke(SPIDER))


def test_tracing_sees_router_name_tags_and_margins(batched: dict[str, Any]) -> None:
    recorder: Recorder = batched["recorder"]
    assert len(recorder.starts) == 3
    for start in recorder.starts:
        assert start["name"] == "route"
        assert "tm-test" in start["tags"]
        assert start["metadata"]["suite"] == "langchain"
    outputs = recorder.ends
    assert [o.question for o in outputs] == [d.question for d in batched["decisions"]]
    assert outputs[0].m == pytest.approx(batched["decisions"][0].m)


def test_default_run_name_is_the_router(router: TrustMarginRouter) -> None:
    recorder = Recorder()
    router.invoke(SPIDER, config={"callbacks": [recorder]})
    assert recorder.starts[0]["name"] == "TrustMarginRouter"


# -- schemas and input errors -------------------------------------------------------------


def test_input_and_output_schemas(router: TrustMarginRouter) -> None:
    assert router.get_input_schema() is TrustMarginInput
    schema = router.get_input_jsonschema()
    assert schema["required"] == ["question", "direct_answer", "rag_answer"]
    assert {"documents", "context", "id"} <= set(schema["properties"])
    assert router.get_output_schema() is Decision
    output = router.get_output_jsonschema()
    assert {"answer", "m_prior", "m_bind", "m", "source"} <= set(output["properties"])


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


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"question": 42}, "question"),
        ({"direct_answer": ["Paris"]}, "direct_answer"),
        ({"rag_answer": 3.5}, "rag_answer"),
        ({"documents": "Lyon is a city."}, "documents"),
        ({"documents": [{"page_content": "Lyon"}]}, "documents[0]"),
        ({"documents": [Document(page_content="  ")]}, "documents[0].page_content"),
        ({"context": ["ok", 7]}, "context[1]"),
    ],
)
def test_wrongly_typed_key_is_named(router: TrustMarginRouter, change: dict[str, Any],
                                    field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        router.invoke({**BRIDGE, **change})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_non_dict_input_is_rejected(router: TrustMarginRouter) -> None:
    with pytest.raises(InvalidInputError) as err:
        router.invoke("Who designed the Velmora Bridge?")
    assert err.value.field == "input"


def test_empty_documents_is_a_clear_error_before_any_model_call(
        router: TrustMarginRouter) -> None:
    with Spy(router.tm.backend, "run_jobs") as spy, pytest.raises(InvalidInputError) as err:
        router.invoke({**FRANCE, "documents": []})
    assert err.value.field == "documents"
    assert "empty" in err.value.problem
    assert spy.calls == []


def test_batch_return_exceptions_keeps_good_items(router: TrustMarginRouter) -> None:
    bad = {**SPIDER, "rag_answer": 8}
    good, error = router.batch([SPIDER, bad], return_exceptions=True)
    assert isinstance(good, Decision) and good.source == "agree"
    assert isinstance(error, InvalidInputError) and error.field == "rag_answer"
    with pytest.raises(InvalidInputError):
        router.batch([SPIDER, bad])


def test_typed_input_record_and_titles_reach_the_prompt(tm: TrustMargin) -> None:
    router = TrustMarginRouter(tm=tm, include_prompts=True)
    record = TrustMarginInput(question=SPIDER["question"], direct_answer="eight",
                              rag_answer="eight", id="q7",
                              documents=[Document(page_content="A spider has eight legs.",
                                                  metadata={"title": "Spider"})])
    decision = router.invoke(record)
    assert decision.id == "q7"
    assert decision.prompts is not None
    assert "Passage 0: Spider: A spider has eight legs." in decision.prompts.question_context


def test_documents_win_over_a_formatted_context_string(tm: TrustMargin) -> None:
    router = TrustMarginRouter(tm=tm, include_prompts=True)
    decision = router.invoke({**SPIDER, "context": "Passage 0: unrelated text",
                              "documents": [Document(page_content="Spiders have eight legs.")]})
    assert decision.prompts is not None
    assert "Passage 0: Spiders have eight legs." in decision.prompts.context_only
    assert "unrelated" not in decision.prompts.context_only


def test_none_answer_is_generated_by_the_scorer_model(tm: TrustMargin) -> None:
    short = TrustMargin(tm.backend, TrustMarginConfig(max_new_tokens=6))
    decision = TrustMarginRouter(tm=short).invoke({**BRIDGE, "rag_answer": None})
    assert decision.rag_generated and not decision.direct_generated
    assert decision.rag_answer.strip()
    assert decision.direct_answer == "Gustave Eiffel"


# -- retriever, LLM and the full chain ------------------------------------------------------


def test_bm25_retriever_returns_documents_with_metadata(index: BM25Index) -> None:
    retriever = BM25Retriever(index=index, k=2)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("Who designed the Velmora Bridge?")
    assert 1 <= len(docs) <= 2
    top = docs[0]
    assert top.id == "bridge"
    assert top.metadata["title"] == "Velmora Bridge"
    assert top.metadata["score"] > 0
    assert document_to_passage(top) == f"Velmora Bridge: {top.page_content}"
    assert retriever.invoke("zebra xylophone") == []


def test_local_llm_batches_prompts_in_one_generate_call(backend: Any) -> None:
    llm = LocalLLM(backend=backend, max_new_tokens=4)
    prompts = ["Say hello.", "Name a colour."]
    with Spy(backend, "generate") as spy:
        texts = llm.batch(prompts)
    assert len(spy.calls) == 1
    expected = backend.generate([backend.render_prompt(p) for p in prompts], 4)
    assert texts == expected


def test_local_llm_cuts_at_stop_sequences(backend: Any) -> None:
    llm = LocalLLM(backend=backend, max_new_tokens=6)
    prompt = "Count from one to five."
    full = llm.invoke(prompt)
    assert len(full) >= 4
    stop = full[2:4]
    assert llm.invoke(prompt, stop=["\u2603", stop]) == full[:full.find(stop)]


def test_helper_chain_runs_end_to_end_and_matches_the_core(tm: TrustMargin,
                                                           index: BM25Index) -> None:
    config = TrustMarginConfig(max_new_tokens=8)
    short = TrustMargin(tm.backend, config)
    llm = LocalLLM.from_trustmargin(short)
    retriever = BM25Retriever(index=index, k=2)
    chain = build_trustmargin_chain(retriever, llm, llm, TrustMarginRouter(tm=short))
    question = "Which river flows through Quenby?"
    decision = chain.invoke(question)
    assert isinstance(decision, Decision)
    assert decision.passages_given == len(retriever.invoke(question))
    # A bare local model gets the appendix prompts, so the chain reproduces the core's
    # own generate-and-score path for the same passages.
    core = short.arbitrate(question, index.search(question, 2))
    assert decision.direct_answer == core.direct_answer
    assert decision.rag_answer == core.rag_answer
    assert decision.source == core.source
    if core.m is not None:
        assert decision.m == pytest.approx(core.m, abs=1e-4)
    assert not decision.direct_generated and core.direct_generated


def test_helper_chain_rejects_a_missing_question(tm: TrustMargin, index: BM25Index) -> None:
    llm = LocalLLM.from_trustmargin(tm)
    chain = build_trustmargin_chain(BM25Retriever(index=index), llm, llm,
                                    TrustMarginRouter(tm=tm))
    with pytest.raises(InvalidInputError) as err:
        chain.invoke({"query": "Which river flows through Quenby?"})
    assert err.value.field == "question"
