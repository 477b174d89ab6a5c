"""An unusable input is a typed error naming its field at every door it can enter (the API,
a batch, the LangChain router, a ``score`` input file, every file reader), whatever makes it
unusable: a lone surrogate, invisible characters, a missing ``page_content``, a key given
twice. Values that are only unusual (a surrogate in an id or metadata) never break a Decision.

Wrong argument types to the public API are in tests/test_api_typed_errors.py; numbers in
tests/test_number_checks.py; the command line's bad options in tests/test_cli_boundary.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from score_support import GOOD, PASSAGE, QUESTION, Loader, score_settings

from trustmargin_integrations import (
    BM25Index,
    Decision,
    InvalidInputError,
    Passage,
    TrustMargin,
)
from trustmargin_integrations.langchain import TrustMarginRouter
from trustmargin_integrations.score_file import run_score


def test_a_lone_surrogate_is_a_typed_error_at_every_door(tm: TrustMargin,
                                                          tmp_path: Path) -> None:
    for kwargs, field in (({"question": "Who\ud800?"}, "question"),
                          ({"passages": ["ok", "\udcff"]}, "passages[1]"),
                          ({"rag_answer": "\ud800"}, "rag_answer")):
        with pytest.raises(InvalidInputError) as err:
            tm.arbitrate(**{**GOOD, **kwargs})
        assert err.value.field == field
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "question": "\ud800"}) + "\n",
                   encoding="utf-8")  # json.dumps writes the surrogate as the escape \ud800
    with pytest.raises(InvalidInputError) as line:
        run_score(src, tmp_path / "o.jsonl", score_settings(), Loader(None), batch_size=1,
                  progress=False)
    assert line.value.field == f"{src}:2.question"


@pytest.mark.parametrize("extra", [{"id": "q-\ud800"}, {"metadata": {"gold": "\udcff"}}])
def test_a_lone_surrogate_in_an_id_or_metadata_never_breaks_a_decision(
    tm: TrustMargin, extra: dict[str, Any]
) -> None:
    """Refused with a typed error naming the field, or carried in a Decision that can be
    written as JSON; never a Decision that fails to serialize."""
    try:
        decisions = tm.arbitrate_batch([GOOD, {**GOOD, **extra}])
    except InvalidInputError as exc:
        assert exc.field.startswith(f"inputs[1].{next(iter(extra))}"), exc
        return
    for decision in decisions:
        Decision.model_validate_json(decision.model_dump_json())


def test_a_question_of_zero_width_characters_is_a_typed_error(tm: TrustMargin) -> None:
    for question in ("\u200b", "\u200b\u200c\u200d\u2060\ufeff", " \u200e\u200f\t"):
        with pytest.raises(InvalidInputError) as err:
            tm.arbitrate(question, [PASSAGE], "a", "b")
        assert err.value.field == "question" and "visible" in err.value.problem


def test_one_question_is_called_question_at_every_door(tm: TrustMargin) -> None:
    """An unusable question is ``question`` for one question and ``questions[i]`` in
    ``answer_batch``, whatever makes it unusable (blank, invisible, not Unicode): never
    ``inputs[0].question``, a name the caller never used."""
    index = BM25Index.build([Passage(id="p0", title="Zelvora Bridge", text=PASSAGE)])
    for bad in ("   ", "\u200b\u200d\ufeff", "Who\ud800?"):
        with pytest.raises(InvalidInputError) as one:
            tm.answer(bad, index, k=1, direct_answer="a", rag_answer="b")
        assert one.value.field == "question", (bad, one.value.field)
        with pytest.raises(InvalidInputError) as batch:
            tm.answer_batch(["Who built it?", bad], index, k=1, direct_answers=["a", "a"],
                            rag_answers=["b", "b"])
        assert batch.value.field == "questions[1]", (bad, batch.value.field)


def test_a_document_dict_without_page_content_is_a_typed_error(tm: TrustMargin) -> None:
    """The router reads documents as Document objects "or their dict form": a dict without
    ``page_content`` is named like any other bad document, in ``invoke`` and in ``batch``."""
    router = TrustMarginRouter(tm=tm)
    good = {"question": QUESTION, "direct_answer": "Gustave Eiffel",
            "rag_answer": "Marta Okonkwo", "documents": [{"page_content": PASSAGE}]}
    bad = {**good, "documents": [{"page_content": PASSAGE}, {}]}
    with pytest.raises(InvalidInputError) as err:
        router.invoke(bad)
    assert err.value.field.startswith("documents[1]"), err.value.field
    results = router.batch([good, bad], return_exceptions=True)
    assert isinstance(results[0], Decision)
    assert isinstance(results[1], InvalidInputError), repr(results[1])
    assert results[1].field.startswith("inputs[1].documents[1]")


def test_a_duplicate_json_key_is_refused_at_every_reader(tmp_path: Path) -> None:
    """The standard parser silently keeps the last of two equal keys; every file a user
    gives us (score input, corpus, dataset, calibration) refuses it, naming the record."""
    from trustmargin_integrations.evaluation.datasets import load_examples
    from trustmargin_integrations.policy_file import PolicyFile
    from trustmargin_integrations.retrieval.corpus import load_corpus

    twice = ('{"question": "Q1?", "question": "Q2?", "passages": ["p"], '
             '"direct_answer": "a", "rag_answer": "b"}\n')
    score_input = tmp_path / "in.jsonl"
    score_input.write_text(twice, encoding="utf-8")
    with pytest.raises(InvalidInputError) as err:
        run_score(score_input, tmp_path / "out.jsonl", score_settings(), Loader(None),
                  batch_size=1, progress=False)
    assert err.value.field == f"{score_input}:1" and "'question' twice" in str(err.value)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"title": "A", "text": "x", "text": "y"}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="'text' twice"):
        load_corpus(corpus)
    dataset = tmp_path / "labeled.json"
    dataset.write_text('[{"question": "Q?", "answer": "a", "answer": "b", '
                       '"passages": ["p"]}]', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="'answer' twice"):
        load_examples(dataset)
    calibration = tmp_path / "calibration.json"
    calibration.write_text('{"lambda_bind": 0.5, "lambda_bind": 0.9}', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="'lambda_bind' twice"):
        PolicyFile.load(calibration)
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"title": "A", "text": "x", "score": NaN}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="NaN is not a JSON number"):
        load_corpus(nan)
