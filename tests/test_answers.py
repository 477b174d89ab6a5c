"""Answer cleaning and normalization on tricky generations."""

from __future__ import annotations

import pytest

from trustmargin_integrations.answers import (
    answer_complete,
    answers_agree,
    clean_answer,
    normalize_answer,
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
