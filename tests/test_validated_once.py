"""The input is validated once, where it enters, by its model; the stages after it take the
validated model, return what they have to say (warnings, each pair's agreement) instead of
writing it into the input, and never change what the caller passed.

Real parts throughout: the embedded model, a real BM25 index. The spies wrap the real
functions (they count calls and change nothing).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError
from score_support import PASSAGE, QUESTION

from trustmargin_integrations import (
    BM25Index,
    InvalidInputError,
    Passage,
    TrustMargin,
    TrustMarginConfig,
    validation,
)
from trustmargin_integrations.arbiter import comparisons
from trustmargin_integrations.validation import ArbitrationInput


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str,
              counted: Callable[..., bool] = lambda *a: True) -> list[int]:
    """Wrap ``module.name`` so that calls for which ``counted(*args)`` holds are counted."""
    real = getattr(module, name)
    calls = [0]

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls[0] += counted(*args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_building_the_input_is_validating_it() -> None:
    """The model is the one definition of a usable input: a bad field is refused where it
    is built, as a typed error naming the field (never pydantic's ValidationError), and a
    built one holds the cleaned texts."""
    for fields, field in (({"question": "\u200b", "passages": []}, "question"),
                          ({"question": "Q?", "passages": "one text"}, "passages"),
                          ({"question": "Q?", "passages": ["ok", " "]}, "passages[1]"),
                          ({"question": "Q?", "passages": [], "rag_answer": "a",
                            "rag_candidates": ["b"]}, "rag_candidates"),
                          ({"question": "Q?", "passages": [], "gold": "x"}, "gold")):
        for build in (lambda f: ArbitrationInput(**f), ArbitrationInput.model_validate):
            try:
                build(fields)
            except ValidationError as exc:  # pragma: no cover - the defect this test finds
                pytest.fail(f"pydantic's error reached the caller: {exc}")
            except InvalidInputError as exc:
                assert exc.field == field, (fields, exc.field)
            else:
                pytest.fail(f"{fields} was accepted")
    built = ArbitrationInput(question=" Who built\x00 it? ",
                             passages=["A\x07 text.", {"text": "B", "title": "T", "id": "b"}],
                             id=7, rag_candidates={"bm25": "x"})
    assert (built.question, built.id, built.rag_candidates) == ("Who built it?", "7",
                                                                [("bm25", "x")])
    assert built.contexts == ["A text.", "T: B"]
    assert built.passages[1] == Passage(id="b", text="B", title="T")
    assert built.warnings == ("question: removed 1 control character(s)",
                              "passages[0]: removed 1 control character(s)")


def test_the_question_is_validated_once_on_its_way_through_the_arbiter(
        tm: TrustMargin, monkeypatch: pytest.MonkeyPatch) -> None:
    """``answer`` (retrieval, then arbitration with the model) cleans and checks its question
    once; so do ``answer_batch`` and ``arbitrate_batch`` per question."""
    index = BM25Index.build([Passage(id="p0", title="Zelvora Bridge", text=PASSAGE)])
    cleaned = _counting(monkeypatch, validation, "strip_controls",
                        lambda text: text == QUESTION)
    decision = tm.answer(QUESTION, index, k=1, direct_answer="Gustave Eiffel",
                         rag_answer="Marta Okonkwo")
    assert decision.passages_used == 1 and decision.m is not None
    assert cleaned[0] == 1
    cleaned[0] = 0
    tm.answer_batch([QUESTION, QUESTION], index, k=1, direct_answers=["a", "a"],
                    rag_answers=["b", "b"])
    assert cleaned[0] == 2
    cleaned[0] = 0
    tm.arbitrate_batch([{"question": QUESTION, "passages": [PASSAGE], "direct_answer": "a",
                         "rag_answer": "b"}])
    assert cleaned[0] == 1


def test_arbitrating_never_changes_what_the_caller_passed(tm: TrustMargin) -> None:
    """A dict, a built ArbitrationInput and a prepared question come back unchanged from
    arbitration, however many times they are arbitrated; each stage's warnings reach the
    Decision (a validation cleanup, a given answer cut to its short form) once."""
    short = TrustMargin(tm.backend, TrustMarginConfig(scoring_form="paper"))
    item = {"question": QUESTION + "\x07", "passages": [PASSAGE],
            "direct_answer": "Sure! Gustave Eiffel.\n\nMore.", "rag_answer": "Marta Okonkwo"}
    built = ArbitrationInput(**item)
    prepared = short.prepare(item)
    before = copy.deepcopy([item, built, prepared])
    decisions = [short.arbitrate_batch([x])[0] for x in (item, built, prepared, prepared)]
    assert [item, built, prepared] == before
    # A dict is validated in the batch, so its warnings name its place there.
    assert decisions[0].warnings[0] == "inputs[0].question: removed 1 control character(s)"
    for decision in decisions[1:]:
        assert decision.warnings == decisions[1].warnings
    assert decisions[1].warnings[0] == "question: removed 1 control character(s)"
    assert decisions[0].warnings[1:] == decisions[1].warnings[1:]
    assert sum("direct_answer: scored on its short form" in w
               for w in decisions[1].warnings) == 1


def test_each_pair_is_compared_once(tm: TrustMargin, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether two answers agree is found once per pair (by reading a list's short answers,
    or by aligning two chat texts) and passed on to settling and the record."""
    compared = _counting(monkeypatch, comparisons, "same_reading")
    aligned = _counting(monkeypatch, comparisons, "differential")
    agreeing = tm.arbitrate(QUESTION, [PASSAGE], direct_answer="**Answer:** Marta Okonkwo",
                            rag_answer="### Answer\nMarta Okonkwo.")
    assert agreeing.reason == "answers_agree"
    assert (aligned[0], compared[0]) == (1, 0)
    aligned[0] = 0
    three = tm.arbitrate(QUESTION, [PASSAGE], direct_answer="Gustave Eiffel",
                         rag_candidates=["Marta Okonkwo", "Gustave Eiffel", "Marta Okonkwo"])
    assert three.rag_candidates[1].agrees_with_direct
    assert (aligned[0], compared[0]) == (0, 3)
