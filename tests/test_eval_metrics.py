"""Token F1 / EM / gold stated against hand-computed cases (paper's normalization, aliases,
yes/no)."""

from __future__ import annotations

import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.metrics import (
    contains_gold,
    exact_match,
    mean_x100,
    token_f1,
    token_f1_single,
)


def test_normalization_makes_articles_case_and_punctuation_irrelevant() -> None:
    assert exact_match("The Beatles!", "beatles") == 1.0
    assert token_f1("  the   EIFFEL tower. ", "Eiffel Tower") == 1.0


def test_partial_overlap_by_hand() -> None:
    # pred {paris, france}, gold {paris}: precision 1/2, recall 1 -> F1 = 2/3.
    assert token_f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    # pred {john, smith, jr}, gold {john, smith}: P 2/3, R 1 -> 0.8.
    assert token_f1("John Smith Jr.", "John Smith") == pytest.approx(0.8)
    # Repeated tokens count once per occurrence: pred {new, new, york}, gold {new, york}:
    # overlap 2, P 2/3, R 1 -> 0.8.
    assert token_f1("New New York", "New York") == pytest.approx(0.8)
    assert exact_match("Paris, France", "Paris") == 0.0
    assert token_f1("Berlin", "Paris") == 0.0


def test_max_over_aliases() -> None:
    gold = ["Kenya Shilling", "Kenyan shilling"]
    assert token_f1("the Kenyan shilling", gold) == 1.0
    assert exact_match("kenya shilling", gold) == 1.0
    # Best alias for "shilling": each alias gives P 1, R 1/2 -> 2/3.
    assert token_f1("shilling", gold) == pytest.approx(2 / 3)
    assert token_f1("Braylon Edwards", "Braylon Edwards") == token_f1("Braylon Edwards",
                                                                       ["Braylon Edwards"])


def test_yes_no_noanswer_are_all_or_nothing() -> None:
    assert token_f1("yes", "no") == 0.0
    # Without the special case "no way" vs "no" would get F1 2/3.
    assert token_f1_single("no way", "no") == 0.0
    assert token_f1_single("no", "no way") == 0.0
    assert token_f1("No.", "no") == 1.0
    assert exact_match("Yes", "yes") == 1.0
    assert token_f1("noanswer", "no answer") == 0.0
    # Ordinary answers that merely contain "no" are scored by overlap as usual:
    # {no, mans, land} vs {no, man, land} (the apostrophe is dropped): P = R = 2/3.
    assert token_f1("no man's land", "no man land") == pytest.approx(2 / 3)


def test_mean_is_on_the_paper_scale() -> None:
    assert mean_x100([1.0, 0.0, 0.5, 0.5]) == pytest.approx(50.0)
    assert mean_x100([]) == 0.0


def test_gold_stated_in_a_chat_answer_by_hand() -> None:
    chat = "Hello! The answer is **the Kenyan shilling**. Let me know if you need more."
    # Stated among other words: full credit, where F1 is diluted and EM is 0.
    assert contains_gold(chat, ["Kenyan shilling"]) == 1.0
    assert token_f1(chat, ["Kenyan shilling"]) < 0.3 and exact_match(chat, "Kenyan shilling") == 0
    # Any alias; one gold string is one alias (not its characters).
    assert contains_gold(chat, ["Kenya Shilling", "Kenyan shilling"]) == 1.0
    assert contains_gold("It is in Paris.", "Paris") == 1.0
    # Whole words only, after normalization.
    assert contains_gold("The Parisian quarter.", ["Paris"]) == 0.0
    assert contains_gold("Shilling, Kenyan.", ["Kenyan shilling"]) == 0.0
    assert contains_gold("", ["Paris"]) == 0.0


@pytest.mark.parametrize("gold", [[], [3], None])
@pytest.mark.parametrize("metric", [token_f1, exact_match, contains_gold])
def test_bad_gold_is_a_typed_error(gold: object, metric: object) -> None:
    with pytest.raises(InvalidInputError) as info:
        metric("x", gold)  # type: ignore[operator]
    assert info.value.field == "gold"
