"""Two chains frame their answers differently ("Anna Berg is the answer to your question."
against "The passages say that the answer is Tomas Rilke."): each compared part is scored
alone and after both sides' framing words, so the words one chain writes before its answer
cannot raise or lower that side alone. Pure pieces, and a scripted backend whose framing
lifts whatever follows it (a fake: it stands for a model whose likelihoods move with the
words before a continuation, as the embedded model's do: tests/test_framing_invariance.py)."""

from __future__ import annotations

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.arbiter.comparisons import Compared, Piece, in_each_framing
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.testing import ScriptedBackend, ScriptedPrompt

QUESTION = "Who designed the Velmora Bridge?"
PASSAGE = "The Velmora Bridge was designed by the engineer Tomas Rilke."
CITING = "The passages say that the answer is"


def _pair(direct: tuple[Piece, ...], rag: tuple[Piece, ...], form: str = "differential",
          agree: bool = False) -> Compared:
    return Compared(form, agree, direct, rag, "", "")  # type: ignore[arg-type]


def test_each_part_is_scored_alone_and_after_both_sides_framing_words() -> None:
    pair = _pair((Piece("I believe it is", " Anna Berg"),), (Piece(CITING, " Tomas Rilke"),))
    each = in_each_framing(pair)
    assert each.direct == (Piece("", "Anna Berg"), Piece("I believe it is", " Anna Berg"),
                           Piece(CITING, " Anna Berg"))
    assert each.rag == (Piece("", "Tomas Rilke"), Piece("I believe it is", " Tomas Rilke"),
                        Piece(CITING, " Tomas Rilke"))


def test_a_part_that_opens_its_text_is_scored_as_a_bare_answer_in_the_other_framing() -> None:
    each = in_each_framing(_pair((Piece("", "Anna Berg"),), (Piece(CITING, " Tomas Rilke"),)))
    assert each.direct == (Piece("", "Anna Berg"), Piece(CITING, " Anna Berg"))
    assert each.rag == (Piece("", "Tomas Rilke"), Piece(CITING, " Tomas Rilke"))


def test_parts_after_the_same_words_are_also_scored_alone() -> None:
    """The same framing on both sides: the margin is each part's mean alone and in its
    sentence (a small scorer's likelihoods after "the answer is" are not those of the bare
    answer, which the paper scores)."""
    each = in_each_framing(_pair((Piece("It is", " Anna Berg"),), (Piece("It is", "\nTomas"),)))
    assert each.direct == (Piece("", "Anna Berg"), Piece("It is", " Anna Berg"))
    assert each.rag == (Piece("", "Tomas"), Piece("It is", "\nTomas"))


@pytest.mark.parametrize("pair", [
    # Bare parts: nothing of their clauses before either.
    _pair((Piece("", "Anna Berg"),), (Piece("", "Tomas Rilke"),)),
    # The paper's short answers, texts that agree, and the extraction form: no framing.
    _pair((Piece("", "Anna Berg"),), (Piece("", "Tomas Rilke"),), form="paper"),
    _pair((Piece("It is", " Paris"),), (Piece("So", " Paris"),), agree=True),
    _pair((Piece("", "Anna Berg"),), (Piece("", "Tomas Rilke"),), form="extract"),
])
def test_bare_parts_and_other_forms_are_scored_as_before(pair: Compared) -> None:
    assert in_each_framing(pair) is pair


# Per-token means under each view: the closed-book view favours Anna Berg, the context favours
# Tomas Rilke a little; the bare margin keeps Direct (M = -2.0 + 0.5 * 0.5 = -1.75 < tau -1.5).
BARE = {("question_only", "Anna Berg"): -1.0, ("question_only", "Tomas Rilke"): -3.0,
        ("question_context", "Anna Berg"): -2.0, ("question_context", "Tomas Rilke"): -1.5,
        ("context_only", "Anna Berg"): -2.0, ("context_only", "Tomas Rilke"): -2.0}
FRAMING_LIFT = 1.0


def _framing_lifts(read: ScriptedPrompt, continuation: str) -> float:
    """The citing chain's words raise whatever follows them, under every view; the question
    raises the names (as bare answers) and nothing else, so they are the compared parts."""
    words = continuation.strip()
    if read.view == "question_free" or (read.view, words) not in BARE:
        return -4.0
    return BARE[(read.view, words)] + (FRAMING_LIFT if read.prefix == CITING else 0.0)


@pytest.mark.parametrize(("direct", "rag"), [
    ("Anna Berg is the answer to your question.", f"{CITING} Tomas Rilke."),
    (f"{CITING} Anna Berg.", "Tomas Rilke is the answer to your question."),
])
def test_one_chains_framing_words_do_not_move_the_margin(direct: str, rag: str) -> None:
    """Scored after its own framing only, the citing side would gain the framing's whole
    lift in the closed-book view (M -1.75 -> -0.75: RAG kept instead of Direct); scored alone
    and after both sides' framings, the lift falls on both answers alike, and the decision is
    the bare one, whichever chain cites."""
    backend = ScriptedBackend(answers={}, logprobs=_framing_lifts)
    tm = TrustMargin(backend, TrustMarginConfig(scoring_form="differential"))
    bare = tm.arbitrate(QUESTION, [PASSAGE], direct_answer="Anna Berg",
                        rag_answer="Tomas Rilke")
    framed = tm.arbitrate(QUESTION, [PASSAGE], direct_answer=direct, rag_answer=rag)
    assert (framed.direct_answer, framed.rag_answer) == ("Anna Berg", "Tomas Rilke")
    assert bare.m == pytest.approx(-1.75)
    assert framed.m is not None
    assert framed.m - bare.m == pytest.approx(0.0, abs=1e-9)
    assert framed.source == bare.source == "direct"
    # |y| is the answer's length, not that of its readings in three framings together.
    assert framed.direct_likelihoods is not None and bare.direct_likelihoods is not None
    assert framed.direct_likelihoods.num_tokens == bare.direct_likelihoods.num_tokens == 2
