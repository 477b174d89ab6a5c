"""What two chat answers say decides, not how they say it: chain texts are compared where they
differ (the differential scoring form), in any language and framing, and never reported as
agreeing unless no word differs. Real embedded model, real shared benchmark questions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.comparison import differential, scored_text
from trustmargin_integrations.evaluation.datasets import load_dataset
from trustmargin_integrations.evaluation.framing import (
    FRAMINGS,
    MIXED_FRAMINGS,
    decision_scores,
    disagreements,
    invariance,
    suite_summary,
)
from trustmargin_integrations.reading import keys

DATA_DIR = Path(os.environ.get("TRUSTMARGIN_DATA")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "raw")

QUESTION = "In which district of Velmora does the Kessel bridge stand?"
PASSAGES = ["The Kessel bridge, finished in 1911, stands in the Weststadt district of Velmora.",
            "Velmora has two districts on the river: Oststadt and Weststadt."]
LEAD_INS = ["Hello!", "Let me think step by step.", "I'm happy to help!", "Bien sûr !", "Gerne!"]


@pytest.mark.slow
@pytest.mark.parametrize("lead_in", LEAD_INS)
def test_opposite_facts_behind_one_lead_in_are_scored(tm: TrustMargin, lead_in: str) -> None:
    direct = f"{lead_in} The Kessel bridge stands in Oststadt."
    rag = f"{lead_in} The Kessel bridge stands in Weststadt."
    d = tm.arbitrate(QUESTION, PASSAGES, direct_answer=direct, rag_answer=rag)
    assert d.source != "agree" and d.reason in {"margin_above_tau", "margin_at_or_below_tau"}
    assert d.m is not None and d.direct_likelihoods is not None
    assert d.scoring_form == "differential"
    # The record says what was compared: the differing facts, located in the given texts.
    assert (d.direct_answer, d.rag_answer) == ("Oststadt", "Weststadt")
    assert d.direct_spans is not None and d.rag_spans is not None
    assert [direct[s:e] for s, e in d.direct_spans] == ["Oststadt"]
    assert [rag[s:e] for s, e in d.rag_spans] == ["Weststadt"]
    # The user's text comes back whole.
    assert d.answer == (rag if d.source == "rag" else direct)


def _mean_after(tm: TrustMargin, prompt: str, prefixes: list[str], part: str) -> float:
    """A plain teacher-forced pass: ``part`` scored alone (an empty prefix) and after each
    prefix, the mean log-probability over all its tokens."""
    from trustmargin_integrations.backends.base import ContinuationRequest

    plain = tm.backend.score_continuations([
        ContinuationRequest(prompt + prefix, f" {part}" if prefix else part)
        for prefix in prefixes])
    return sum(s.logprob_sum for s in plain) / sum(s.num_tokens for s in plain)


def test_the_shared_context_before_the_difference_is_conditioned_on(tm: TrustMargin) -> None:
    """The differing span is scored alone and after the text of its clause, never after a
    lead-in: the scores are those of a plain teacher-forced pass over prompt + span and over
    prompt + the clause's text before the span + span ("Hello!" ends a clause and never
    enters them)."""
    direct, rag = "Hello! It stands in Oststadt.", "Hello! It stands in Weststadt."
    d = tm.arbitrate(QUESTION, PASSAGES, direct_answer=direct, rag_answer=rag)
    prompt = tm.prepare({"question": QUESTION, "passages": PASSAGES}).views.question_only
    assert d.rag_likelihoods is not None
    assert d.rag_likelihoods.question_only == pytest.approx(
        _mean_after(tm, prompt, ["", "It stands in"], "Weststadt"), abs=1e-4)


def test_each_chains_framing_words_fall_on_both_answers(tm: TrustMargin) -> None:
    """A closed-book chain's "I believe it stands in X." against a RAG chain's "The passages
    say that the bridge stands in Y [1].": each compared name is scored alone and after both
    clauses' words (the likelihood of a side is its tokens' mean over the three, as a plain
    forward pass gives them), so which chain wrote which framing does not move the margin."""
    def closed(a: str) -> str:
        return f"I believe it stands in {a}."

    def cited(a: str) -> str:
        return f"The passages say that the bridge stands in {a} [1]."

    d = tm.arbitrate(QUESTION, PASSAGES, direct_answer=closed("Oststadt"),
                     rag_answer=cited("Weststadt"))
    swapped = tm.arbitrate(QUESTION, PASSAGES, direct_answer=cited("Oststadt"),
                           rag_answer=closed("Weststadt"))
    assert (d.direct_answer, d.rag_answer) == ("Oststadt", "Weststadt")
    assert (swapped.direct_answer, swapped.rag_answer) == ("Oststadt", "Weststadt")
    assert d.m is not None and swapped.m is not None
    assert d.m == pytest.approx(swapped.m, abs=1e-4)
    prompt = tm.prepare({"question": QUESTION, "passages": PASSAGES}).views.question_only
    prefixes = ["", "I believe it stands in", "The passages say that the bridge stands in"]
    for name, got in (("Oststadt", d.direct_likelihoods), ("Weststadt", d.rag_likelihoods)):
        assert got is not None
        assert got.question_only == pytest.approx(_mean_after(tm, prompt, prefixes, name),
                                                  abs=1e-4)


@pytest.mark.parametrize(("direct", "rag", "compared"), [
    # The answers in different places around shared framing words.
    ("Oststadt is the answer to your question.",
     "The passages say that the answer is Weststadt.", ("Oststadt", "Weststadt")),
    # The answers differ by a word one side adds, and the framings differ too.
    ("I believe the answer is Weststadt Nord, but I am not completely sure.",
     "According to the context, the answer is Weststadt.", ("Weststadt Nord", "Weststadt")),
])
def test_differently_framed_answers_are_compared_not_their_framings(
        tm: TrustMargin, direct: str, rag: str, compared: tuple[str, str]) -> None:
    """Two of the mixed framings (closed-book style on Direct, RAG style on RAG) where the
    embedded model compared a framing with an answer, or the two framings, before 2026-11-29
    (eleventh session): each side's part is the one the question raises most on that side,
    and a word one side adds is a candidate place even where the framings also differ."""
    d = tm.arbitrate(QUESTION, PASSAGES, direct_answer=direct, rag_answer=rag)
    assert (d.direct_answer, d.rag_answer) == compared
    assert d.answer in {direct, rag}


def test_an_incidental_first_sentence_is_not_what_is_scored(tm: TrustMargin) -> None:
    direct = "- The bridge is in Velmora.\n- It was finished in 1911."
    rag = "- The bridge is in Velmora.\n- It was finished in 1923."
    d = tm.arbitrate("When was the Kessel bridge finished?", PASSAGES, direct_answer=direct,
                     rag_answer=rag)
    assert (d.direct_answer, d.rag_answer) == ("1911", "1923")
    assert d.source == "direct" or d.m is not None


def test_texts_that_differ_only_in_case_and_punctuation_agree(tm: TrustMargin) -> None:
    d = tm.arbitrate(QUESTION, PASSAGES, direct_answer="**Weststadt.**",
                     rag_answer="weststadt")
    assert d.source == "agree" and d.reason == "answers_agree"


@pytest.mark.slow
def test_generated_candidates_keep_the_papers_scoring(tm: TrustMargin) -> None:
    d = tm.arbitrate(QUESTION, PASSAGES)
    assert d.scoring_form == "paper"
    assert "scoring_form" not in d.model_dump(mode="json", exclude_none=False) or (
        d.model_dump(mode="json").get("scoring_form") is None)
    assert d.direct_spans is None and d.rag_spans is None


def test_return_text_scored_returns_the_compared_form(backend: object) -> None:
    tm = TrustMargin(backend, TrustMarginConfig(return_text="scored"))  # type: ignore[arg-type]
    d = tm.arbitrate(QUESTION, PASSAGES, direct_answer="Gerne! Es ist Oststadt.",
                     rag_answer="Gerne! Es ist Weststadt.")
    assert d.answer in {"Oststadt", "Weststadt"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(categories=("L", "N")), min_size=1,
                        max_size=8), min_size=1, max_size=6),
       st.lists(st.text(alphabet=st.characters(categories=("L", "N")), min_size=1,
                        max_size=8), min_size=1, max_size=6),
       st.sampled_from(["", "Hello! ", "Bien sûr ! ", "### Answer\n\n", "当然！"]))
def test_texts_with_different_words_never_agree(left: list[str], right: list[str],
                                                frame: str) -> None:
    a, b = frame + " ".join(left), frame + " ".join(right)
    found = differential(a, b)
    assert found.agree == (keys(a) == keys(b) and bool(keys(a)))
    if not found.agree and keys(a) and keys(b):
        # Something of each side is compared, and it lies inside that side's text.
        assert found.stretches
        for stretch in found.stretches:
            assert scored_text(a, (stretch.direct,)) and scored_text(b, (stretch.rag,))


def test_one_sided_additions_are_widened_to_a_shared_word() -> None:
    (found,) = differential("Paris", "Paris and Lyon").stretches
    assert scored_text("Paris", (found.direct,)) == "Paris"
    assert scored_text("Paris and Lyon", (found.rag,)) == "Paris and Lyon"
    comparison = differential("Sure! It is Paris.", "It is Paris.")
    assert not comparison.agree
    (found,) = comparison.stretches
    assert scored_text("Sure! It is Paris.", (found.direct,)) == "Sure! It"
    assert scored_text("It is Paris.", (found.rag,)) == "It"


def _shared_questions(per_dataset: int) -> list[tuple[str, list[str], list[str]]]:
    out = []
    for name in ("cwq", "2wiki", "hotpotqa"):
        for example in load_dataset(name, DATA_DIR)[:per_dataset]:
            out.append((example.question, [p.as_context() for p in example.passages or ()],
                        list(example.answers)))
    return out


@pytest.mark.slow
def test_framing_invariance_on_the_shared_dev_sets(backend: object) -> None:
    """The bounds, on the model's own strict disagreements: with the same framing on both
    sides (14 framings) the framed decision keeps the bare pair's side in at least 90% of the
    pairs away from near-ties; with a closed-book framing on Direct and a RAG framing on RAG
    (6 pairs of framings) in at least 85% (measured 57/66 here, 11 pairs; 466/534 on the
    dev sets A + B + C, docs/results/framing/lead-ins.md), far above what a text-blind
    decision reaches;
    no framed pair ever claims agreement, and the framed decisions' F1 stays within 1 point
    of the bare decisions'. (A 256-token context and the first 5 questions of each dataset
    keep this test quick, about 12 disagreements x 20 framings; benchmarks/framing.py
    measures more.)"""
    tm = TrustMargin(backend, TrustMarginConfig(max_context_tokens=256))  # type: ignore[arg-type]
    pairs = disagreements(tm, _shared_questions(5))
    assert len(pairs) >= 8, "too few strict disagreements to measure anything"
    bare, rows = invariance(tm, pairs, {**FRAMINGS, **MIXED_FRAMINGS})
    assert [r.framing for r in rows] == [*FRAMINGS, *MIXED_FRAMINGS]
    assert all(r.agree == 0 for r in rows), {r.framing: r.agree for r in rows if r.agree}
    bare_scores = decision_scores(bare, pairs)
    for suite, bound in ((rows[:len(FRAMINGS)], 0.9), (rows[len(FRAMINGS):], 0.85)):
        s = suite_summary(suite, bare_scores)
        assert s.compared >= 4 * len(suite)
        assert s.kept / s.compared >= bound, {r.framing: f"{r.kept_side}/{r.compared}"
                                              for r in suite}
        assert s.kept / s.compared > s.text_blind + 0.1
        assert s.f1_vs_bare is not None and abs(s.f1_vs_bare.mean) <= 1.0
