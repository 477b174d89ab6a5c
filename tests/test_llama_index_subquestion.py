"""LlamaIndex's SubQuestionQueryEngine with the local LLM, and its decision reachable in the
response.

Real parts: SubQuestionQueryEngine, QueryEngineTools over RetrieverQueryEngines, LlamaIndex's
own LLMQuestionGenerator (which a 135M model cannot drive), the embedded SmolLM2 model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
import pytest
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.query_engine import RetrieverQueryEngine, SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.schema import QueryBundle
from llama_index.core.tools import QueryEngineTool, ToolMetadata
from pydantic import Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index import (
    METADATA_KEY,
    DecisionRecord,
    LocalLlamaIndexLLM,
    LocalQuestionGenerator,
    PassageRetriever,
    TrustMarginDecisionEvent,
    TrustMarginQueryEngine,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Decision, Passage

QUESTION = "Who designed the Velmora Bridge and which river flows through Quenby?"


class Decisions(BaseEventHandler):
    decisions: list[Decision] = Field(default_factory=list)

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, TrustMarginDecisionEvent):
            self.decisions.append(event.decision)


@pytest.fixture
def decisions() -> Iterator[Decisions]:
    handler = Decisions()
    instrument.get_dispatcher().add_event_handler(handler)
    yield handler
    instrument.get_dispatcher().event_handlers.remove(handler)


@pytest.fixture(scope="module")
def llm(tm: TrustMargin) -> LocalLlamaIndexLLM:
    return LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=24)


@pytest.fixture(scope="module")
def tools(tm: TrustMargin, llm: LocalLlamaIndexLLM) -> list[QueryEngineTool]:
    def guarded(passage: Passage) -> TrustMarginQueryEngine:
        retriever = PassageRetriever(BM25Index.build([passage]), similarity_top_k=1)
        return TrustMarginQueryEngine(RetrieverQueryEngine.from_args(retriever, llm=llm), tm,
                                      llm=llm)

    return [
        QueryEngineTool(guarded(Passage(id="velmora", title="Velmora Bridge", text=(
            "The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."))),
            ToolMetadata(name="bridges", description="Facts about bridges")),
        QueryEngineTool(guarded(Passage(id="quenby", title="Quenby", text=(
            "The Zorblat river flows through Quenby."))),
            ToolMetadata(name="rivers", description="Facts about rivers and towns")),
    ]


def test_llamaindex_own_generator_cannot_be_driven_by_the_small_model(
        llm: LocalLlamaIndexLLM, tools: list[QueryEngineTool]) -> None:
    # What a user gets without LocalQuestionGenerator: the model answers in prose.
    with pytest.raises(ValueError, match="No valid JSON"):
        LLMQuestionGenerator.from_defaults(llm=llm).generate(
            [t.metadata for t in tools], QueryBundle(QUESTION))


@pytest.mark.slow
def test_sub_questions_name_real_tools_and_the_decision_reaches_the_response(
        tm: TrustMargin, llm: LocalLlamaIndexLLM, tools: list[QueryEngineTool],
        decisions: Decisions) -> None:
    generator = LocalQuestionGenerator(llm, max_questions=2)
    questions = generator.generate([t.metadata for t in tools], QueryBundle(QUESTION))
    assert 1 <= len(questions) <= 2
    assert all(q.tool_name in ("bridges", "rivers") and q.sub_question for q in questions)
    engine = SubQuestionQueryEngine.from_defaults(tools, llm=llm, question_gen=generator,
                                                  use_async=False, verbose=False)
    # Wrapped, the sub-question engine's final answer is arbitrated like any engine's: the
    # decision is in the response; each sub-engine's decision went out on the bus.
    response = TrustMarginQueryEngine(engine, tm, llm=llm).query(QUESTION)
    assert response.response
    record = response.metadata[METADATA_KEY]
    assert isinstance(record, DecisionRecord) and record.decision.question == QUESTION
    asked = [d.question for d in decisions.decisions]
    assert asked[-1] == QUESTION and len(asked) == len(questions) + 1
    assert set(asked[:-1]) == {q.sub_question for q in questions}


def test_the_generator_refuses_what_it_cannot_use(tm: TrustMargin,
                                                  llm: LocalLlamaIndexLLM) -> None:
    with pytest.raises(InvalidInputError) as err:
        LocalQuestionGenerator(object())  # type: ignore[arg-type]
    assert err.value.field == "llm"
    with pytest.raises(InvalidInputError) as err:
        LocalQuestionGenerator(llm, max_questions=0)
    assert err.value.field == "max_questions"
    with pytest.raises(InvalidInputError) as err:
        LocalQuestionGenerator(llm).generate([], QueryBundle(QUESTION))
    assert err.value.field == "query_engine_tools"
