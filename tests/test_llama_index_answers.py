"""What TrustMarginQueryEngine gives back on chat-style answers, on real LlamaIndex
engines with the real embedded model as the scorer.

The candidates here come from a SCRIPTED LLM (:class:`ScriptedLLM`): the tests must know the
exact multi-paragraph, preamble and markdown texts to check that they come back byte for byte,
and the 135M model does not write a given text on demand. Everything else is real: the
``RetrieverQueryEngine``, its synthesizer and prompts, the BM25 retriever and the scoring.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import CustomQueryEngine, RetrieverQueryEngine
from llama_index.core.schema import QueryBundle

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index import (
    CLOSED_BOOK_PROMPT_KEY,
    METADATA_KEY,
    DecisionRecord,
    PassageRetriever,
    TrustMarginQueryEngine,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule.replay import replay
from trustmargin_integrations.schema import Decision, Passage

QUESTION = "Who designed the Velmora Bridge?"
UNANSWERABLE = "Who painted the Zanfir mural?"  # shares no term with the corpus
RAG_CHAT = ("The Velmora Bridge was designed by the engineer Tomas Rilke.\n\n"
            "Some further details:\n- It opened in 1962.\n- It crosses the Oster river.")
DIRECT_CHAT = ("I believe it was Gustave Eiffel.\n\n"
               "He designed many bridges in the nineteenth century.")
PREAMBLE = "Sure! Here is what I know:"


class ScriptedLLM(CustomLLM):
    """SCRIPTED LLM (see the module docstring): replies ``reply``, logs every prompt."""

    reply: str
    prompts: Any = None  # a list shared with the test (Any: pydantic would copy a list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-chat", context_window=4096, num_output=256)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        if self.prompts is not None:
            self.prompts.append(prompt)
        return CompletionResponse(text=self.reply)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt, formatted, **kwargs)


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build([
        Passage(id="velmora", title="Velmora Bridge",
                text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
        Passage(id="harbour", title="Oststadt harbour",
                text="The harbour of Oststadt handles grain and timber."),
    ])


def wrapped(tm: TrustMargin, index: BM25Index, rag: str, direct: str,
            log: list[str] | None = None, **kwargs: Any) -> TrustMarginQueryEngine:
    """A tutorial-shaped engine answering ``rag``, wrapped with a closed-book LLM saying
    ``direct``; ``log`` receives every prompt either LLM is sent."""
    inner = RetrieverQueryEngine.from_args(PassageRetriever(index, similarity_top_k=2),
                                           llm=ScriptedLLM(reply=rag, prompts=log))
    return TrustMarginQueryEngine(inner, tm, llm=ScriptedLLM(reply=direct, prompts=log),
                                  **kwargs)


def test_a_multi_paragraph_answer_comes_back_whole(tm: TrustMargin, index: BM25Index) -> None:
    # A blank closed-book answer cannot win: the RAG side is kept, settled without scoring.
    response = wrapped(tm, index, RAG_CHAT, "").query(QUESTION)
    decision = response.metadata[METADATA_KEY]
    assert decision.source == "rag"
    assert response.response == RAG_CHAT  # all four lines, as the user's engine wrote them
    # Nothing to compare it with (the other side is blank): the Decision records the text
    # whole, and its answer is the text as given.
    assert decision.scoring_form == "differential"
    assert decision.rag_answer == decision.answer == RAG_CHAT.strip()
    # Without evidence the closed-book side is kept, and it too comes back whole.
    response = wrapped(tm, index, RAG_CHAT, DIRECT_CHAT).query(UNANSWERABLE)
    decision = response.metadata[METADATA_KEY]
    assert (decision.reason, response.response) == ("no_evidence", DIRECT_CHAT)
    assert decision.answer == DIRECT_CHAT.strip()
    # The Decision records the compared part of each text where the two differ, by offsets
    # into the text (the inner engine found no node and answered its own "Empty Response").
    assert decision.direct_raw == DIRECT_CHAT and decision.direct_spans
    assert " … ".join(DIRECT_CHAT[a:b] for a, b in decision.direct_spans) == \
        decision.direct_answer
    assert "Gustave Eiffel" in decision.direct_answer


def test_a_scored_decision_returns_the_chosen_side_in_full(tm: TrustMargin,
                                                           index: BM25Index) -> None:
    response = wrapped(tm, index, RAG_CHAT, DIRECT_CHAT).query(QUESTION)
    decision = response.metadata[METADATA_KEY]
    assert decision.m is not None  # scored by the real model, not settled
    chosen = RAG_CHAT if replay(decision) == "rag" else DIRECT_CHAT
    assert response.response == chosen
    # The Decision keeps the parts that were compared, and the texts they came from.
    assert (decision.direct_raw, decision.rag_raw) == (DIRECT_CHAT, RAG_CHAT)
    assert decision.answer == chosen.strip()


@pytest.mark.parametrize("direct", [
    f"{PREAMBLE}\n\nThe Velmora Bridge was designed by Gustave Eiffel.",
    "**Answer:** Gustave Eiffel",
])
def test_a_preamble_or_label_is_never_what_comes_back(tm: TrustMargin, index: BM25Index,
                                                      direct: str) -> None:
    rag = f"{PREAMBLE}\n\nThe Velmora Bridge was designed by Tomas Rilke."
    response = wrapped(tm, index, rag, direct).query(QUESTION)
    decision = response.metadata[METADATA_KEY]
    # Whatever the core decides, the caller gets one side's whole answer, with its name.
    assert response.response in (rag, direct)
    assert response.response.strip() != PREAMBLE
    assert ("Rilke" if replay(decision) == "rag" else "Eiffel") in response.response


def test_blank_and_oversized_questions_are_refused_before_anything_runs(
        tm: TrustMargin, index: BM25Index) -> None:
    log: list[str] = []
    engine = wrapped(tm, index, RAG_CHAT, DIRECT_CHAT, log)
    for question in ("   ", "\u200b", "word " * 40_000):  # the last: a 200k-character paste
        with pytest.raises(InvalidInputError) as err:
            engine.query(question)
        assert err.value.field == "query"
    assert "context window" in str(err.value)
    assert log == []  # neither the inner engine's LLM nor the closed-book LLM was called


def test_prompts_round_trip_and_query_str(tm: TrustMargin, index: BM25Index) -> None:
    log: list[str] = []
    engine = wrapped(tm, index, RAG_CHAT, "Gustave Eiffel", log,
                     closed_book_prompt="Answer briefly: {query_str}")
    prompts = engine.get_prompts()
    key = "query_engine:response_synthesizer:text_qa_template"
    assert {CLOSED_BOOK_PROMPT_KEY, key} <= set(prompts)
    engine.update_prompts(prompts)  # every key get_prompts() lists is accepted back
    engine.update_prompts({key: PromptTemplate("Context: {context_str}\nQ: {query_str}\nA:")})
    assert engine.get_prompts()[key].get_template() == "Context: {context_str}\nQ: {query_str}\nA:"
    response = engine.query(QUESTION)
    assert f"Answer briefly: {QUESTION}" in log  # LlamaIndex's placeholder name works
    assert any(p.startswith("Context: ") and p.endswith(f"Q: {QUESTION}\nA:") for p in log)
    # The response's metadata is JSON, and its record still reads like the Decision.
    record = response.metadata[METADATA_KEY]
    assert isinstance(record, DecisionRecord) and isinstance(record.decision, Decision)
    loaded = json.loads(json.dumps(response.metadata))
    assert loaded[METADATA_KEY] == record.decision.model_dump(mode="json")
    assert Decision.model_validate(loaded[METADATA_KEY]) == record.decision
    for twin in (copy.deepcopy(record), pickle.loads(pickle.dumps(record))):
        assert twin == record and twin.decision == record.decision and twin.source
    with pytest.raises(InvalidInputError) as err:
        engine.update_prompts({CLOSED_BOOK_PROMPT_KEY: "{question} or {query_str}"})
    assert err.value.field == CLOSED_BOOK_PROMPT_KEY


class Echo(CustomQueryEngine):
    """A user's own engine without retrieval (LlamaIndex's CustomQueryEngine)."""

    def custom_query(self, query_str: str) -> str:
        return query_str


def test_retrieve_is_forwarded_to_the_inner_engine(tm: TrustMargin, index: BM25Index) -> None:
    engine = wrapped(tm, index, RAG_CHAT, DIRECT_CHAT)
    nodes = engine.retrieve(QueryBundle(QUESTION))
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in
                                               engine.query_engine.retrieve(QueryBundle(QUESTION))]
    assert nodes[0].node.node_id == "velmora"
    with pytest.raises(NotImplementedError):  # the inner engine cannot retrieve, as before
        TrustMarginQueryEngine(Echo(), tm).retrieve(QUESTION)
    evidence = TrustMarginQueryEngine(Echo(), tm, evidence="retriever", retriever=index, k=1)
    assert [n.node.node_id for n in evidence.retrieve(QUESTION)] == ["velmora"]
