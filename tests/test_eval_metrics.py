"""Token F1 / EM against hand-computed cases (paper's normalization, aliases, yes/no)."""

from __future__ import annotations

import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.metrics import (
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


@pytest.mark.parametrize("gold", [[], [3], None])
def test_bad_gold_is_a_typed_error(gold: object) -> None:
    with pytest.raises(InvalidInputError) as info:
        token_f1("x", gold)  # type: ignore[arg-type]
    assert info.value.field == "gold"
