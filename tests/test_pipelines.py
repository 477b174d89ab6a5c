"""The four candidate-source pipelines on the real SmolLM2-135M and a real BM25 index.

The index is the demo corpus (40 passages written for this project, real BM25 scores). The
questions and limits are few and small: these tests run on a shared 2-core CPU. Where a
test depends on what the model generates (greedy fp32, deterministic), the trace is also
checked against an independent recomputation, so a wrong pipeline fails either way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch

from trustmargin_integrations import BM25Index, InvalidInputError, Passage
from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import (
    Capabilities,
    ContinuationRequest,
    ContinuationScore,
    EngineDefaults,
    ModelSession,
    StopPredicate,
)
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.demo import demo_corpus
from trustmargin_integrations.pipelines import (
    PIPELINES,
    CLeHePipeline,
    DTRPipeline,
    FLAREPipeline,
    IRCoTPipeline,
    Pipeline,
    PipelineResult,
    build_pipeline,
    rrf_merge,
)
from trustmargin_integrations.pipelines.ircot import marker_answer
from trustmargin_integrations.prompts import join_passages, view_texts

# Greedy SmolLM2 behaviour on the demo corpus (checked when these tests were written): it
# ends its first IRCoT reasoning sentence with the answer marker for MARKER_Q, and writes a
# plain reasoning sentence for OPEN_Q. OPEN_Q's first FLARE look-ahead sentence has a token
# below 0.4 ("The" at ~0.23), CONFIDENT_Q's has none (minimum ~0.62).
MARKER_Q = "What is the capital of Saint Orrel?"
OPEN_Q = "Who designed the Zelvora Bridge?"
CONFIDENT_Q = "In what year did the Zelvora Bridge open?"


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(demo_corpus())


class ProtocolOnlyBackend(EngineDefaults):
    """The real HFBackend seen through the Backend protocol only (not a mock: every call
    runs the real model). It is not an HFBackend, so it stands for any other engine (token
    counts and batches from the protocol's defaults)."""

    def __init__(self, inner: HFBackend) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.context_window = inner.context_window

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(kind="protocol-only", model=self.model_id)

    def render_prompt(self, user_message: str) -> str:
        return self.inner.render_prompt(user_message)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def truncate_tokens(self, text: str, max_tokens: int) -> str:
        return self.inner.truncate_tokens(text, max_tokens)

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        return self.inner.generate(prompts, max_new_tokens, stop=stop)

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        return self.inner.score_continuations(requests)

    def session(self) -> AbstractContextManager[ModelSession]:
        return self.inner.session()


def by_id(index: BM25Index, ids: Sequence[str | None]) -> list[Passage]:
    table = {p.id: p for p in index.passages}
    return [table[str(i)] for i in ids]


def rag_prompt(backend: HFBackend, question: str, passages: Sequence[Passage]) -> str:
    """The paper's rendered question+context prompt, built here from the public helpers."""
    context = join_passages([p.as_context() for p in passages])
    return backend.render_prompt(view_texts(question, context).question_context)


def assert_serializable(result: PipelineResult) -> dict[str, Any]:
    meta = result.to_metadata()
    json.dumps(meta, allow_nan=False)
    assert meta["pipeline"] == result.pipeline and meta["params"] == result.params
    assert len(meta["steps"]) == len(result.steps) and result.seconds > 0
    return meta


# -- IRCoT --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ircot_stops_at_the_marker_and_at_the_step_limit(backend: HFBackend,
                                                         index: BM25Index) -> None:
    pipeline = IRCoTPipeline(ProtocolOnlyBackend(backend), index, k=2, max_steps=1,
                             sentence_max_new_tokens=20, max_new_tokens=8)
    marked, limited = pipeline.run_batch([MARKER_Q, OPEN_Q])

    # Stopped at the marker: one reasoning sentence, the answer is what follows the marker,
    # no reader and no retrieval after the answer.
    [reason] = marked.steps_of("reason")
    assert reason.extra["marker"] and "answer is:" in reason.text.lower()
    assert marked.answer == marker_answer(reason.text) != ""
    assert "Saint Orrel" in marked.answer
    assert marked.steps_of("read") == [] and len(marked.steps_of("retrieve")) == 1
    assert marked.retrieved and [p.id for p in marked.passages] == \
        [p.id for p in marked.steps[0].passages]

    # Stopped at the step limit: exactly one reasoning sentence (no marker), a retrieval
    # with that sentence, then the reader over the gathered passages.
    [reason] = limited.steps_of("reason")
    assert not reason.extra["marker"] and reason.text
    retrievals = limited.steps_of("retrieve")
    assert len(retrievals) <= 1 + pipeline.max_steps
    assert retrievals[0].query == OPEN_Q and retrievals[-1].query == reason.text
    [read] = limited.steps_of("read")
    assert limited.steps[-1] is read and read.extra["reason"] == "step limit"
    assert limited.answer == read.text and "Okonkwo" in limited.answer
    gathered = {p.id for r in retrievals for p in r.passages}
    assert {p.id for p in limited.passages} <= gathered
    assert len(limited.passages) <= pipeline.max_passages
    for result in (marked, limited):
        meta = assert_serializable(result)
        assert meta["params"]["max_steps"] == 1 and meta["params"]["k"] == 2


def test_marker_answer_reads_the_answer_after_the_marker() -> None:
    assert marker_answer("So the answer is: Aarhus.") == "Aarhus."
    assert marker_answer("Aarhus is a city.") is None


# -- FLARE --------------------------------------------------------------------------------------


def independent_probabilities(backend: HFBackend, index: BM25Index, question: str,
                              result: PipelineResult) -> list[float]:
    """The first look-ahead sentence's token probabilities from a plain forward pass."""
    lookahead = result.steps_of("generate")[0]
    assert lookahead.extra["role"] == "look-ahead"
    passages = by_id(index, [p.id for p in lookahead.passages])
    prompt = backend.encode_prompt(rag_prompt(backend, question, passages))
    sentence = lookahead.extra["ids"]
    with torch.inference_mode():
        logits = backend.model(torch.tensor([prompt + sentence])).logits[0].float()
    probs = torch.softmax(logits[len(prompt) - 1:-1], dim=-1)
    return [float(probs[i, t]) for i, t in enumerate(sentence)]


@pytest.mark.slow
def test_flare_retrieves_exactly_when_a_token_falls_below_theta(backend: HFBackend,
                                                                index: BM25Index) -> None:
    pipeline = FLAREPipeline(backend, index, k=2, max_steps=1, sentence_max_new_tokens=10)
    assert pipeline.mask_threshold == pipeline.theta == 0.4
    outcomes = []
    for question, result in zip([OPEN_Q, CONFIDENT_Q],
                                pipeline.run_batch([OPEN_Q, CONFIDENT_Q]), strict=True):
        probs = independent_probabilities(backend, index, question, result)
        lookahead = result.steps_of("generate")[0]
        assert lookahead.extra["probs"] == pytest.approx(probs, abs=1e-4)
        below = min(probs) < pipeline.theta
        retrievals = result.steps_of("retrieve")
        assert retrievals[0].query == question and retrievals[0].extra["initial"]
        assert len(retrievals) == 1 + below
        [decide] = result.steps_of("decide")
        assert decide.extra["retrieve"] is below
        if below:
            # The masked query drops exactly the tokens below the mask threshold, and the
            # sentence is regenerated over the new passages and kept.
            masked = [t for t, p in zip(lookahead.extra["tokens"], probs, strict=True)
                      if p < pipeline.mask_threshold]
            assert retrievals[1].extra["masked_tokens"] == masked
            regenerated = result.steps_of("generate")[1]
            assert regenerated.extra["role"] == "regenerated"
            assert result.answer == regenerated.text
        else:
            assert result.answer == lookahead.text
        assert_serializable(result)
        outcomes.append(below)
    assert outcomes == [True, False]  # both branches were exercised


@pytest.mark.slow
def test_flare_continues_the_answer_sentence_by_sentence(backend: HFBackend,
                                                        index: BM25Index) -> None:
    # Sentences of at most 8 tokens: OPEN_Q's answer needs a second one.
    result = FLAREPipeline(backend, index, k=2, max_steps=3, sentence_max_new_tokens=8
                           ).run(OPEN_Q)
    kept: list[list[int]] = []
    for step in sorted({s.extra["step"] for s in result.steps_of("generate")}):
        generated = [s for s in result.steps_of("generate") if s.extra["step"] == step]
        lookahead = generated[0]
        if kept:
            # A later look-ahead continues the kept sentences: recompute its probabilities
            # after prompt + those tokens.
            passages = by_id(index, [p.id for p in lookahead.passages])
            prefix = backend.encode_prompt(rag_prompt(backend, OPEN_Q, passages))
            prefix += [t for ids in kept for t in ids]
            ids = lookahead.extra["ids"]
            with torch.inference_mode():
                logits = backend.model(torch.tensor([prefix + ids])).logits[0].float()
            probs = torch.softmax(logits[len(prefix) - 1:-1], dim=-1)
            assert lookahead.extra["probs"] == pytest.approx(
                [float(probs[i, t]) for i, t in enumerate(ids)], abs=1e-4)
        kept.append(generated[-1].extra["ids"])
    assert len(kept) >= 2
    assert result.answer == backend.tokenizer.decode([t for ids in kept for t in ids],
                                                     skip_special_tokens=True)
    assert "Okonkwo" in result.answer


@pytest.mark.slow
@pytest.mark.parametrize(("question", "theta", "retrieves"),
                         [(OPEN_Q, 1e-9, False), (CONFIDENT_Q, 1 - 1e-9, True)])
def test_flare_theta_near_zero_never_and_near_one_always_retrieves(
        backend: HFBackend, index: BM25Index, question: str, theta: float,
        retrieves: bool) -> None:
    result = FLAREPipeline(backend, index, k=2, max_steps=1, theta=theta,
                           sentence_max_new_tokens=10).run(question)
    probs = independent_probabilities(backend, index, question, result)
    assert (min(probs) < theta) is retrieves
    assert len(result.steps_of("retrieve")) == 1 + retrieves


# -- CLeHe --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_clehe_weights_sum_to_one_and_layers_are_intermediate(backend: HFBackend,
                                                              index: BM25Index) -> None:
    pipeline = CLeHePipeline(backend, index, k=3, max_new_tokens=4)
    result = pipeline.run(MARKER_Q)
    [decode] = result.steps_of("decode")
    records = decode.extra["trace"]
    assert records and len(result.passages) == 3
    for record in records:
        assert len(record["weights"]) == 3
        assert math.fsum(record["weights"]) == pytest.approx(1.0, abs=1e-6)
        assert all(0.0 <= w <= 1.0 for w in record["weights"])
        # Lower entropy, higher weight: the weights are softmax(-H / temperature).
        expected = torch.softmax(-torch.tensor(record["entropies"]) / pipeline.temperature, 0)
        assert record["weights"] == pytest.approx(expected.tolist(), abs=1e-6)
        n = backend.model.config.num_hidden_layers
        assert n // 2 <= record["layer"] < n
    assert result.retrieved and result.answer == decode.text
    assert_serializable(result)


@pytest.mark.slow
def test_clehe_with_beta_zero_and_one_document_is_plain_greedy(backend: HFBackend,
                                                               index: BM25Index) -> None:
    result = CLeHePipeline(backend, index, k=1, beta=0.0, max_new_tokens=12).run(OPEN_Q)
    [passage] = result.passages
    assert passage.id == index.search(OPEN_Q, 1)[0].id
    greedy = backend.generate([rag_prompt(backend, OPEN_Q, [passage])], 12,
                              stop=answer_complete)[0]
    assert result.answer == greedy and greedy.strip()
    records = result.steps_of("decode")[0].extra["trace"]
    assert all(r["weights"] == [1.0] for r in records)


# -- DTR ----------------------------------------------------------------------------------------


def test_rrf_merge_orders_by_fused_rank_and_dedupes() -> None:
    a, b, c, d = (Passage(id=i, text=i) for i in "abcd")
    merged = rrf_merge([[a, b, c], [c, d, a, a]], k=3)
    # a: 1/61 + 1/63, c: 1/63 + 1/61 (tie: a was seen first), b: 1/62, d: 1/62 (b first).
    assert [p.id for p in merged] == ["a", "c", "b"]
    assert merged[0].score == pytest.approx(1 / 61 + 1 / 63)


def test_dtr_skips_retrieval_when_the_direct_answer_is_confident(backend: HFBackend,
                                                                 index: BM25Index) -> None:
    prompt = backend.render_prompt(view_texts(CONFIDENT_Q, "").question_only)
    direct = backend.generate([prompt], 8, stop=answer_complete)[0]
    nll = -backend.score_continuations([ContinuationRequest(prompt, direct.strip())])[0].mean
    result = DTRPipeline(ProtocolOnlyBackend(backend), index, k=3, threshold=nll + 0.01,
                         max_new_tokens=8).run(CONFIDENT_Q)
    assert result.answer == direct and not result.retrieved and result.passages == []
    assert result.steps_of("retrieve") == []
    [decide] = result.steps_of("decide")
    assert decide.extra["nll"] == pytest.approx(nll, abs=1e-6) and not decide.extra["retrieve"]
    assert_serializable(result)


@pytest.mark.slow
def test_dtr_retrieves_with_both_queries_and_merges_by_rrf(backend: HFBackend,
                                                           index: BM25Index) -> None:
    k = 3
    result = DTRPipeline(ProtocolOnlyBackend(backend), index, k=k, threshold=-1.0,
                         max_new_tokens=8, pseudo_max_new_tokens=24).run(OPEN_Q)
    assert result.retrieved
    pseudo = next(s for s in result.steps if s.extra.get("role") == "pseudo-passage").text
    assert pseudo and pseudo.strip()
    by_question, by_pseudo = result.steps_of("retrieve")
    assert by_question.query == OPEN_Q and by_pseudo.query == pseudo.strip()
    # Recompute both BM25 rankings and their RRF merge independently.
    first, second = index.search(OPEN_Q, k), index.search(pseudo.strip(), k)
    assert [p.id for p in by_question.passages] == [p.id for p in first]
    assert [p.id for p in by_pseudo.passages] == [p.id for p in second]
    fused: dict[str, float] = {}
    for ranking in (first, second):
        for rank, p in enumerate(ranking, start=1):
            fused[p.id] = fused.get(p.id, 0.0) + 1 / (60 + rank)
    expected = sorted(fused, key=lambda i: (-fused[i], [p.id for p in first + second].index(i)))
    assert [p.id for p in result.passages] == expected[:k]
    assert [p.score for p in result.passages] == pytest.approx([fused[i] for i in expected[:k]])
    final = result.steps[-1]
    assert final.extra["role"] == "rag" and result.answer == final.text
    greedy = backend.generate([rag_prompt(backend, OPEN_Q, result.passages)], 8,
                              stop=answer_complete)[0]
    assert result.answer == greedy
    assert_serializable(result)


# -- parameters, registry, backends -------------------------------------------------------------


@pytest.mark.parametrize(("cls", "params", "field"), [
    (IRCoTPipeline, {"max_steps": 0}, "max_steps"),
    (IRCoTPipeline, {"k": 0}, "k"),
    (IRCoTPipeline, {"max_passages": 1.5}, "max_passages"),
    (FLAREPipeline, {"theta": 1.0}, "theta"),
    (FLAREPipeline, {"theta": 0.0}, "theta"),
    (FLAREPipeline, {"mask_threshold": 1.5}, "mask_threshold"),
    (FLAREPipeline, {"max_steps": True}, "max_steps"),
    (CLeHePipeline, {"temperature": 0.0}, "temperature"),
    (CLeHePipeline, {"beta": -0.1}, "beta"),
    (CLeHePipeline, {"layer_start": 1.0}, "layer_start"),
    (CLeHePipeline, {"plausibility": float("nan")}, "plausibility"),
    (DTRPipeline, {"threshold": float("inf")}, "threshold"),
    (DTRPipeline, {"batch_size": 0}, "batch_size"),
])
def test_bad_parameters_are_typed_errors_naming_the_parameter(
        backend: HFBackend, index: BM25Index, cls: Any, params: dict[str, Any],
        field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        cls(backend, index, **params)
    assert err.value.field == field and field in err.value.fix


def test_build_pipeline_knows_the_four_and_lists_them_for_an_unknown_name(
        backend: HFBackend, index: BM25Index) -> None:
    assert sorted(PIPELINES) == ["clehe", "dtr", "flare", "ircot"]
    pipeline = build_pipeline("ircot", backend, index, k=5)
    assert isinstance(pipeline, IRCoTPipeline) and isinstance(pipeline, Pipeline)
    assert pipeline.params()["k"] == 5
    with pytest.raises(InvalidInputError) as err:
        build_pipeline("self-rag", backend, index)
    assert err.value.field == "pipeline"
    assert all(name in err.value.fix for name in PIPELINES)
    with pytest.raises(InvalidInputError) as err:
        build_pipeline("dtr", backend, index, top_p=0.9)
    assert err.value.field == "top_p" and "threshold" in err.value.fix
    with pytest.raises(InvalidInputError) as err:
        pipeline.run("  ")
    assert err.value.field == "questions[0]"


@pytest.mark.parametrize("name", ["flare", "clehe"])
def test_model_access_pipelines_refuse_other_backends(backend: HFBackend, index: BM25Index,
                                                      name: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        build_pipeline(name, ProtocolOnlyBackend(backend), index)
    assert err.value.field == "backend" and "HFBackend" in err.value.fix
    # The protocol-only pipelines take it.
    assert build_pipeline("dtr", ProtocolOnlyBackend(backend), index).name == "dtr"
