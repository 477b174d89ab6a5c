"""Which parts of two differently framed chat answers are compared: the candidates the
alignment offers (pure text, no model) and the answer-bearing choice among them, on a scripted
backend whose likelihoods make the question raise the answers' words and nothing else."""

from __future__ import annotations

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.arbiter.comparisons import answer_bearing
from trustmargin_integrations.comparison import differential, scored_text
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.reading import same_reading
from trustmargin_integrations.testing import ScriptedBackend, ScriptedPrompt

QUESTION = "Who designed the Velmora Bridge?"
PASSAGE = "The Velmora Bridge was designed by the engineer Tomas Rilke."

# A closed-book chain's framing of Direct and a RAG chain's framing of its own answer.
FRAMED = [
    ("I believe it is Anna Berg, but I am not completely sure.",
     "According to the context, it is Tomas Rilke."),
    ("From what I remember, it is Anna Berg.", "Based on the provided passages, it is "
     "Tomas Rilke [1]."),
    ("Hello! It is Anna Berg.", "Hello! It is Tomas Rilke."),
    ("### Answer\n\n**Anna Berg**", "### Answer\n\n**Tomas Rilke**"),
    # The two answers in different places around shared framing words.
    ("Anna Berg is the answer to your question.",
     "The passages say that the answer is Tomas Rilke."),
    # The RAG answer inside a sentence, with a citation, that only the RAG chain writes.
    ("Anna Berg.", "The retrieved documents state the answer: Tomas Rilke (see Passage 0)."),
]


def _candidates_for(question: str, direct: str, rag: str) -> list[tuple[str, str]]:
    found = differential(direct, rag, question)
    return [(scored_text(direct, (s.direct,)), scored_text(rag, (s.rag,)))
            for s in found.stretches]


def _candidates(direct: str, rag: str) -> list[tuple[str, str]]:
    return _candidates_for(QUESTION, direct, rag)


@pytest.mark.parametrize(("direct", "rag"), FRAMED)
def test_the_two_answers_are_among_the_candidates_whatever_the_framing(direct: str,
                                                                       rag: str) -> None:
    candidates = _candidates(direct, rag)
    assert any(d.endswith("Anna Berg") for d, _ in candidates), candidates
    assert any(r.endswith("Tomas Rilke") for _, r in candidates), candidates


@pytest.mark.parametrize(("direct", "rag"), [*FRAMED, ("Paris", "Paris, France [1]")])
def test_no_candidate_compares_two_sides_that_read_alike(direct: str, rag: str) -> None:
    for d, r in _candidates(direct, rag):
        assert not same_reading(d, r), (d, r)


def test_an_addition_is_widened_to_the_word_it_adds_to() -> None:
    assert _candidates("Paris", "Paris, France") == [("Paris", "Paris, France")]


@pytest.mark.parametrize(("direct", "rag", "compared"), [
    ("The answer is (B).", "The answer is C.", [("B", "C")]),
    ('The word is "serendipity".', "The word is luck.", [("serendipity", "luck")]),
    # The colon stands where the other text says "is": its answer alone is a candidate too.
    ("The answer: Paris", "The answer is Lyon", [("Paris", "is Lyon"), ("Paris", "Lyon")]),
])
def test_an_answer_behind_a_bracket_quote_or_colon_is_compared(
        direct: str, rag: str, compared: list[tuple[str, str]]) -> None:
    """Where one side opens a bracket, a quote or a colon and the other goes on with the
    clause, both answers are compared. A rule that read the opening side as an aside (a
    citation mark, a source line) and compared only the other side's addition was measured
    (docs/results/framing/smollm2-135m-mixed-dev-sets.md) and not adopted: it dropped these
    answers, which nothing but a model can tell from a citation."""
    assert _candidates(direct, rag) == compared


def _raised_by_the_question(read: ScriptedPrompt, continuation: str) -> float:
    """The question raises only the two names (as a bare answer after the question-only
    prompt, against the same prompt with nothing asked); framing reads the same either way.
    Under the three views every compared part scores alike, so the margins are 0."""
    words = continuation.strip()
    if read.view == "question_only" and not read.prefix and words in {"Anna Berg",
                                                                      "Tomas Rilke"}:
        return -0.5
    return -3.0


@pytest.mark.parametrize(("direct", "rag"), FRAMED)
def test_the_answer_bearing_parts_are_the_ones_the_question_raises(direct: str,
                                                                   rag: str) -> None:
    backend = ScriptedBackend(answers={}, logprobs=_raised_by_the_question)
    # The difference form's own choice, named (the default is it for this scorer, of unknown
    # size; one claiming 1B parameters or more would be asked for extractions instead).
    difference_form = TrustMarginConfig(scoring_form="differential")
    decision = TrustMargin(backend, difference_form).arbitrate(
        QUESTION, [PASSAGE], direct_answer=direct, rag_answer=rag)
    assert (decision.direct_answer, decision.rag_answer) == ("Anna Berg", "Tomas Rilke")
    # The user's text comes back whole, whichever side is kept.
    assert decision.answer in {direct, rag}


def test_a_remark_the_question_happens_to_raise_does_not_replace_the_answer() -> None:
    """The embedded model's lifts on a chat answer with remarks ("... designed by Gustave
    Eiffel. - It opened in 1889." against "... designed by Marta Okonkwo in 1987. - It spans
    400 m. - It was restored in 2001."): the question raised the remark "It was restored"
    most on RAG's side, but a later sentence is no reading of the place it follows (the
    candidates read clause by clause only within a first sentence), and the place the
    question raises most on both sides holds the names, where RAG's part is raised too
    (+0.45), so it is kept."""
    direct = ("Sure! Here is what I know:\n\nThe Velmora Bridge was designed by Gustave "
              "Eiffel.\n\nSome further details:\n- It opened in 1889.")
    rag = ("Sure! Here is what I know:\n\nThe Velmora Bridge was designed by Marta Okonkwo "
           "in 1987.\n\nSome further details:\n- It spans 400 m.\n- It was restored in 2001.")
    assert _candidates(direct, rag) == [("Gustave Eiffel", "Marta Okonkwo in 1987"),
                                        ("opened", "spans 400 m"), ("1889", "2001")]
    places = [0, 1, 2]
    raised = [(1.083, 0.448), (-0.178, 0.080), (1.009, 0.128)]
    assert answer_bearing(places, raised) == (0, 0)


def test_a_side_whose_part_is_framing_takes_its_answer_from_another_place() -> None:
    """"Anna Berg is the answer to your question." against "The passages say that the answer
    is Tomas Rilke.": the first place holds Direct's answer and RAG's framing; RAG's answer is
    at the second place, where the question raises RAG's part more, even when it raises the
    framing a little too (the embedded model's lifts on such a pair: +1.25 for "The passages
    say that", +1.47 for the answer "2015")."""
    places = [0, 0, 1, 1]
    raised = [(1.4, -0.1), (2.7, -0.1), (-1.0, 0.3), (-1.0, 0.9)]
    assert answer_bearing(places, raised) == (1, 3)
    measured = [(2.56, 1.25), (3.09, 1.25), (2.56, 0.59), (-0.47, -0.02), (-0.47, 1.47)]
    assert answer_bearing([0, 0, 0, 1, 1], measured) == (1, 4)
    # Equal lifts: the place the question raises most on both sides together.
    assert answer_bearing([0, 1], [(1.0, 0.5), (0.2, 0.5)]) == (0, 0)


def test_a_framing_that_repeats_the_question_does_not_take_an_answers_place() -> None:
    """The embedded model's lifts on "The passages say that the bridge stands in Oststadt [1]."
    against "I believe it stands in Weststadt." (question: "In which district of Velmora does
    the Kessel bridge stand?"): Direct's framing is raised more than its answer (+2.97 against
    +2.40) because it says two of the question's words ("the", "bridge"); the answer has none,
    so it stays where both answers are."""
    places = [0, 1, 1]
    raised = [(2.97, 0.24), (2.40, 5.53), (0.12, 5.53)]
    repeated = [(2, 0), (0, 0), (0, 0)]
    assert answer_bearing(places, raised, repeated) == (1, 1)
    # Counted as saying none of the question's words, the framing would be taken.
    assert answer_bearing(places, raised) == (0, 1)
    # Within a place, each side's best reading (the name without its clause's framing).
    assert answer_bearing([0, 0], [(2.7, 0.3), (2.7, 0.9)]) == (0, 1)


@pytest.mark.parametrize(("direct", "rag", "compared"), [
    # The answers differ by what one side adds, and the framings differ too.
    ("I believe the answer is Golden Globe Award, but I am not completely sure.",
     "According to the context, the answer is Golden Globe.", ("Globe Award", "Globe")),
    # Markdown's colon where the other text says "is".
    ("The answer is German.", "**Answer:** Sweden\n\n*Source: Passage 1*",
     ("German", "Sweden")),
])
def test_an_answer_the_framings_surround_is_a_candidate(direct: str, rag: str,
                                                        compared: tuple[str, str]) -> None:
    """Measured on Qwen2.5-Coder-1.5B's short answers under the mixed framings: where the
    framings also differ, the added word was no candidate (only the framings were compared,
    in 7 of 174 pairs), and "is German" was compared with "Sweden" (7 more)."""
    assert compared in _candidates(direct, rag)


def test_a_lead_in_before_a_word_of_the_question_is_no_candidate() -> None:
    """Measured on the embedded model's own long answers under the mixed framings: the lead-in
    one chain adds was compared as its answer, widened to the question's word it stands
    before ("Tom" against "The passages say that the answer is Tom"), because the question
    raises its own words most (+7.12 for "Tom")."""
    question = "What team did Tom Brady play for?"
    direct = "Tom Brady played for the New England Patriots."
    rag = "The passages say that the answer is Tom Brady played for the Giants."
    candidates = _candidates_for(question, direct, rag)
    assert not any(d == "Tom" for d, _ in candidates), candidates
    assert ("New England Patriots", "Giants") in candidates, candidates


def test_a_word_added_after_a_word_of_the_question_stays_a_candidate() -> None:
    """An addition inside the answer may be the answer's own word, even where the question
    names the answer ("Who is older, Lena Hart or Rahul Mehta?"); a rule that set
    aside every addition next to a question word lost such a pair (a middle name added)
    under the mixed framings."""
    candidates = _candidates_for(
        "Who is older, Lena Hart or Rahul Mehta?",
        "I believe the answer is Rahul Mehta, but I am not completely sure.",
        "According to the context, the answer is Rahul Vikram Mehta.")
    assert ("Rahul", "Rahul Vikram") in candidates, candidates


def test_a_lead_in_before_the_question_s_words_alone_is_still_compared() -> None:
    """Where nothing else differs, the lead-in is what the texts differ by: it is compared,
    never read as agreement."""
    found = differential("Tom Brady.", "The passages say that it is Tom Brady.",
                         "Who is Tom Brady?")
    assert not found.agree
    assert found.stretches
