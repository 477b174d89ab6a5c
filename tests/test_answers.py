"""Answer cleaning and normalization on tricky generations."""

from __future__ import annotations

import pytest

from trustmargin_integrations.answers import (
    answer_complete,
    answers_agree,
    clean_answer,
    normalize_answer,
)
from trustmargin_integrations.comparison import differential, scored_text
from trustmargin_integrations.reading import same_reading


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


def test_a_shared_preamble_never_makes_two_answers_agree() -> None:
    """The paper's cut keeps a chat answer's first line, a shared preamble; a chain's texts are
    read whole (reading.py), so they agree only when they read alike, and what is compared is
    where they differ."""
    direct = "Sure! Here is what I know:\n\nIt was designed by Gustave Eiffel."
    rag = "Sure! Here is what I know:\n\nIt was designed by Tomas Rilke in 1962."
    assert answers_agree(clean_answer(direct), clean_answer(rag))  # the paper's policy: preamble
    assert not same_reading(direct, rag)
    (stretch,) = differential(direct, rag).stretches
    assert scored_text(direct, (stretch.direct,)) == "Gustave Eiffel"
