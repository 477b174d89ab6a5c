"""Answer cleaning and normalization on tricky generations."""

from __future__ import annotations

import pytest

from trustmargin_integrations.answers import (
    answer_complete,
    answers_agree,
    clean_answer,
    normalize_answer,
    scoring_form,
)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Paris", "Paris"),
        ("Paris.", "Paris"),
        ("Answer: Paris.", "Paris"),
        ("answer:answer: Paris", "Paris"),
        ("Answer:\nParis\nThe capital of France.", "Paris"),
        ("\n\n  London  \nmore text", "London"),
        ('The answer is: "Barack Obama".', "Barack Obama"),
        ("The answer is 100", "100"),
        ("Answered by nobody", "Answered by nobody"),
        ("U.S.", "U.S."),
        ("Washington, D.C.", "Washington, D.C."),
        ("1987...", "1987..."),
        ("Answer:", ""),
        ("   ", ""),
        ("Zürich.\r\nsecond line", "Zürich"),
    ],
)
def test_clean_answer(raw: str, clean: str) -> None:
    assert clean_answer(raw) == clean


def test_answer_complete_only_after_a_finished_line() -> None:
    assert not answer_complete("Paris")
    assert not answer_complete("Answer:\n")
    assert not answer_complete("\n\n")
    assert answer_complete("Paris\n")
    assert answer_complete("Answer:\nParis\n")


def test_normalize_and_agree() -> None:
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert answers_agree("The Beatles.", "beatles")
    assert not answers_agree("Paris", "Lyon")
    # Blank answers never agree, even with each other.
    assert not answers_agree("", " ")
    assert not answers_agree("the", "a")


# Chat-style answers as LangChain / LlamaIndex chains produce them: the scored form is
# the answering sentence, never a preamble or a markdown label.
CHAT_ANSWERS = [
    ("The Velmora Bridge was designed by the engineer Tomas Rilke.\n\nSome further details:\n"
     "- It opened in 1962 and spans 400 m.\n- It was restored in 2001.",
     "The Velmora Bridge was designed by the engineer Tomas Rilke"),
    ("Sure! Here is what I know:\n\nThe bridge was designed by Gustave Eiffel.",
     "The bridge was designed by Gustave Eiffel"),
    ("**Answer:** Paris", "Paris"),
    ("### Answer\nParis\n\nParis has been the capital since 508.", "Paris"),
    ("Based on the context, the designer was Marta Okonkwo.", "the designer was Marta Okonkwo"),
    ("According to the provided passages: Marta Okonkwo.", "Marta Okonkwo"),
    ("Certainly! Marta Okonkwo designed it in 1987.", "Marta Okonkwo designed it in 1987"),
    ("Great question! The answer is Paris.", "Paris"),
    ("Here's the answer: 42", "42"),
    ("J. R. R. Tolkien wrote it. It appeared in 1937.", "J. R. R. Tolkien wrote it"),
    ("Dr. Smith was born in St. Louis. He later moved.", "Dr. Smith was born in St. Louis"),
    ("- Paris\n- London", "Paris"),
]


@pytest.mark.parametrize(("raw", "scored"), CHAT_ANSWERS)
def test_scoring_form_of_chat_answers(raw: str, scored: str) -> None:
    assert scoring_form(raw) == scored


@pytest.mark.parametrize(
    "raw", ["Paris", "Paris.", "Answer: Paris.", '"Barack Obama"', "U.S.", "Washington, D.C.",
            "1987...", "Answer:\nParis", "   ", "Zürich.\r\nsecond line", "The answer is 100"])
def test_scoring_form_keeps_the_papers_short_answers(raw: str) -> None:
    assert scoring_form(raw) == clean_answer(raw)


def test_a_shared_preamble_never_makes_two_answers_agree() -> None:
    direct = "Sure! Here is what I know:\n\nIt was designed by Gustave Eiffel."
    rag = "Sure! Here is what I know:\n\nIt was designed by Tomas Rilke in 1962."
    assert answers_agree(clean_answer(direct), clean_answer(rag))  # the paper's policy: preamble
    assert not answers_agree(scoring_form(direct), scoring_form(rag))
