"""The arbiter on the real model: decisions, shortcuts, audit record and bad input."""

from __future__ import annotations

import pytest
from score_support import PASSAGE, QUESTION

from trustmargin_integrations import (
    Decision,
    InvalidInputError,
    ModelLoadError,
    TrustMargin,
    TrustMarginConfig,
)
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.rule import Policy, compute_margins
from trustmargin_integrations.schema import Passage

PASSAGES = [
    "The Zelvora Bridge was designed by the engineer Marta Okonkwo and opened in 1987.",
    "Ferries crossed the Tarn Estuary before the bridge opened.",
]


def test_given_candidates_are_scored_and_decided_by_the_rule(tm: TrustMargin) -> None:
    d = tm.arbitrate("Who designed the Zelvora Bridge?", PASSAGES,
                     direct_answer="Gustave Eiffel", rag_answer="Marta Okonkwo")
    assert not d.direct_generated and not d.rag_generated
    assert d.direct_likelihoods and d.rag_likelihoods
    recomputed = compute_margins(d.direct_likelihoods, d.rag_likelihoods, 0.5)
    assert d.m == pytest.approx(recomputed.m)
    assert d.source == Policy.paper().verdict([recomputed]).choice
    # The evidence names Okonkwo, so the context must raise her likelihood over Eiffel's.
    assert d.m_bind is not None and d.m_bind > 0
    assert d.passages_used == 2 and d.model_id == "smollm2-135m"


def test_generated_candidates_are_clean_short_answers(tm: TrustMargin) -> None:
    d = tm.arbitrate("Who designed the Zelvora Bridge?", PASSAGES)
    assert d.direct_generated and d.rag_generated
    for answer in (d.direct_answer, d.rag_answer):
        assert answer and "\n" not in answer and not answer.lower().startswith("answer:")
        assert not answer.endswith(".")
    assert d.timings.generate_rag_s > 0 and d.timings.total_s > 0


def test_agree_shortcut_skips_scoring(tm: TrustMargin) -> None:
    d = tm.arbitrate("Capital of France?", ["Paris is the capital of France."],
                     direct_answer="Paris.", rag_answer="paris")
    assert (d.source, d.reason, d.m) == ("agree", "answers_agree", None)
    scored = TrustMargin(tm.backend, TrustMarginConfig(skip_scoring_when_agree=False)).arbitrate(
        "Capital of France?", ["Paris is the capital of France."],
        direct_answer="Paris.", rag_answer="paris")
    assert scored.source == "agree" and scored.m is not None


@pytest.mark.parametrize(
    ("direct", "rag", "answer", "reason"),
    [
        ("Paris", "", "Paris", "rag_answer_blank"),
        ("  ", "Lyon", "Lyon", "direct_answer_blank"),
        ("", "", "", "both_answers_blank"),
    ],
)
def test_blank_candidate_never_wins(tm: TrustMargin, direct: str, rag: str, answer: str,
                                    reason: str) -> None:
    d = tm.arbitrate("Capital of France?", ["Lyon is a city."], direct_answer=direct,
                     rag_answer=rag)
    assert (d.answer, d.reason, d.m) == (answer, reason, None)


def test_decision_json_round_trip_and_independent_recomputation(
    tm: TrustMargin, backend: HFBackend
) -> None:
    d = tm.arbitrate("Who designed the Zelvora Bridge?", PASSAGES, direct_answer="Eiffel",
                     rag_answer="Marta Okonkwo", id="q1", include_prompts=True)
    again = Decision.model_validate_json(d.model_dump_json())
    assert again == d and again.id == "q1"
    assert d.prompts is not None
    # Anyone can recompute the six numbers with a plain forward pass from the record alone.
    from trustmargin_integrations.backends.base import ContinuationRequest

    ref = backend.score_continuations([
        ContinuationRequest(d.prompts.question_only, d.rag_answer),
        ContinuationRequest(d.prompts.context_only, d.direct_answer),
    ])
    assert d.rag_likelihoods and d.direct_likelihoods
    assert ref[0].mean == pytest.approx(d.rag_likelihoods.question_only, abs=1e-4)
    assert ref[1].mean == pytest.approx(d.direct_likelihoods.context_only, abs=1e-4)
    assert tm.arbitrate("q?", ["p"], "a", "b").prompts is None  # off by default


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"question": "", "passages": ["p"]}, "question"),
        ({"question": " \n\t", "passages": ["p"]}, "question"),
        ({"question": 42, "passages": ["p"]}, "question"),
        ({"question": "q?"}, "passages"),
        ({"question": "q?", "passages": {"text": "a dict is not a list"}}, "passages"),
        ({"question": "q?", "passages": 5}, "passages"),
        ({"question": "q?", "passages": "one passage as a string"}, "passages"),
        ({"question": "q?", "passages": ["ok", 7]}, "passages[1]"),
        ({"question": "q?", "passages": ["ok", "   "]}, "passages[1]"),
        ({"question": "q?", "passages": ["p"], "direct_answer": 3}, "direct_answer"),
    ],
)
def test_bad_input_names_the_field(tm: TrustMargin, kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        tm.arbitrate_batch([{"question": "fine?", "passages": ["p"]}, kwargs])
    assert info.value.field == f"inputs[1].{field}"
    assert "Fix:" in str(info.value)
    with pytest.raises(InvalidInputError) as single:
        tm.arbitrate(**{"passages": None, **kwargs})
    assert single.value.field == field


def test_unknown_field_is_rejected_not_dropped(tm: TrustMargin) -> None:
    with pytest.raises(InvalidInputError, match="passage_list"):
        tm.arbitrate_batch([{"question": "q?", "passages": ["p"], "passage_list": ["x"]}])


def test_context_over_budget_is_cut_and_recorded(backend: HFBackend) -> None:
    tm = TrustMargin(backend, TrustMarginConfig(max_context_tokens=64))
    long_passages = [f"Passage text number {i} " + "word " * 40 for i in range(5)]
    d = tm.arbitrate("q?", long_passages, direct_answer="a", rag_answer="b")
    assert d.passages_given == 5 and d.passages_used == 1 and d.context_tokens <= 64
    assert any("used 1 of 5" in w for w in d.warnings)
    huge = tm.arbitrate("q?", ["word " * 500], direct_answer="a", rag_answer="b")
    assert huge.context_truncated and huge.context_tokens <= 64
    assert any("cut to" in w for w in huge.warnings)


def test_unicode_and_control_characters(tm: TrustMargin) -> None:
    d = tm.arbitrate("Qui a conçu le pont\x00 Zelvora\x07? 橋", [PASSAGES[0] + " \x1b[31m"],
                     direct_answer="Gustave Eiffel", rag_answer="Marta Okonkwo")
    assert d.question == "Qui a conçu le pont Zelvora? 橋"
    assert any(w.startswith("question: removed 2") for w in d.warnings)
    assert any(w.startswith("passages[0]: removed 1") for w in d.warnings)
    assert d.m is not None


def test_control_characters_are_exactly_unicode_category_cc() -> None:
    """The fast remover drops what the per-character Unicode lookup dropped, over every code
    point (surrogates aside), keeping tab and line feed."""
    import unicodedata

    from trustmargin_integrations.validation import strip_controls

    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    kept = "".join(ch for ch in every if ch in "\n\t" or unicodedata.category(ch) != "Cc")
    assert strip_controls(every) == (kept, len(every) - len(kept))
    assert len(every) - len(kept) == 63  # 65 Cc code points less tab and line feed


def test_prepare_batch_equals_prepare_one_by_one(tm: TrustMargin) -> None:
    """Preparing many inputs together (batched token counts) changes nothing: the same
    contexts, views and warnings as one at a time; already prepared inputs pass through;
    an error names the input's place."""
    small = TrustMargin(tm.backend, TrustMarginConfig(max_context_tokens=40))
    items = [{"question": "Who designed the Zelvora Bridge?", "passages": PASSAGES},
             {"question": "q?", "passages": ["word " * 300], "direct_answer": "a"},
             {"question": "Where is it?", "passages": [], "rag_answer": "Zelvora"},
             {"question": "And then?", "passages": PASSAGES[::-1],
              "rag_candidates": {"bm25": "x", "ircot": "y"}}]
    one_by_one = [small.prepare(item) for item in items]
    assert [p.context.truncated for p in one_by_one[:2]] == [False, True]
    ready = small.prepare(items[0])
    together = small.prepare_batch([*items, ready])
    assert together[-1] is ready
    for alone, batched in zip(one_by_one, together, strict=False):
        assert (batched.context, batched.views) == (alone.context, alone.views)
        assert batched.warnings == alone.warnings
    with pytest.raises(InvalidInputError) as err:
        small.prepare_batch([items[0], {"question": "", "passages": []}])
    assert err.value.field.startswith("inputs[1].question")


def test_passage_objects_are_accepted_and_recorded(tm: TrustMargin) -> None:
    p = Passage(id="z-1", title="Zelvora Bridge", text=PASSAGES[0], score=3.5)
    d = tm.arbitrate("Who designed it?", [p, PASSAGES[1]], direct_answer="x",
                     rag_answer="Marta Okonkwo", include_prompts=True)
    assert d.passages_used == 2
    assert [(r.rank, r.id, r.title, r.score) for r in d.passages] == [
        (0, "z-1", "Zelvora Bridge", 3.5), (1, None, "", None)]
    assert d.prompts is not None
    assert "Passage 0: Zelvora Bridge: The Zelvora" in d.prompts.context_only


def test_no_evidence_answers_closed_book(tm: TrustMargin) -> None:
    d = tm.arbitrate("Who designed the Zelvora Bridge?", [])
    assert (d.source, d.reason, d.m) == ("direct", "no_evidence", None)
    assert d.direct_generated and d.answer == d.direct_answer and d.answer
    assert not d.rag_generated and d.rag_answer == "" and d.passages == []


def test_given_candidates_under_the_paper_form_are_cut_and_reported(
        tm: TrustMargin) -> None:
    short = TrustMargin(tm.backend, TrustMarginConfig(scoring_form="paper"))
    raw = short.arbitrate("Who designed the Zelvora Bridge?", PASSAGES,
                           direct_answer="Gustave Eiffel\nand more text",
                           rag_answer="Answer: Marta Okonkwo.")
    clean = short.arbitrate("Who designed the Zelvora Bridge?", PASSAGES,
                             direct_answer="Gustave Eiffel", rag_answer="Marta Okonkwo")
    assert (raw.direct_answer, raw.rag_answer) == ("Gustave Eiffel", "Marta Okonkwo")
    assert raw.scoring_form == "paper"
    assert raw.m == pytest.approx(clean.m, abs=1e-9)
    assert raw.direct_raw == "Gustave Eiffel\nand more text" and clean.direct_raw is None
    assert sum("scored on its short form" in w for w in raw.warnings) == 2
    assert not clean.warnings
    as_given = TrustMargin(tm.backend, TrustMarginConfig(clean_answers=False)).arbitrate(
        "Who designed the Zelvora Bridge?", PASSAGES,
        direct_answer="Gustave Eiffel\nand more text", rag_answer="Answer: Marta Okonkwo.")
    assert as_given.direct_answer == "Gustave Eiffel\nand more text"
    assert as_given.scoring_form == "whole"
    assert as_given.m != pytest.approx(clean.m, abs=1e-3)


def test_given_texts_with_nothing_in_common_are_compared_on_what_the_question_asks(
        tm: TrustMargin) -> None:
    """No shared word, so the texts differ as wholes; the clauses of their first sentences are
    candidates too, and the question, not a list of labels, picks the names: they are scored
    exactly as the bare names are, with no warning (the record's spans say what was scored)."""
    d = tm.arbitrate("Who designed the Zelvora Bridge?", PASSAGES,
                     direct_answer="Gustave Eiffel\nand more text",
                     rag_answer="Answer: Marta Okonkwo.")
    bare = tm.arbitrate("Who designed the Zelvora Bridge?", PASSAGES,
                        direct_answer="Gustave Eiffel", rag_answer="Marta Okonkwo")
    assert d.scoring_form == "differential" and d.m is not None
    assert (d.direct_answer, d.rag_answer) == ("Gustave Eiffel", "Marta Okonkwo")
    assert d.m == pytest.approx(bare.m, abs=1e-4)
    assert (d.direct_raw, d.rag_raw) == ("Gustave Eiffel\nand more text",
                                         "Answer: Marta Okonkwo.")
    assert not d.warnings


CHAT_DIRECT = ("Sure! Here is what I know:\n\nThe Zelvora Bridge was designed by Gustave "
               "Eiffel.\n\nSome further details:\n- It opened in 1889.")
CHAT_RAG = ("Sure! Here is what I know:\n\nThe Zelvora Bridge was designed by Marta "
            "Okonkwo in 1987.\n\nSome further details:\n- It spans 400 m.\n- It was "
            "restored in 2001.")


def test_chat_answers_are_scored_where_they_differ_and_returned_whole(
        tm: TrustMargin) -> None:
    """A shared preamble neither decides nor comes back: what is scored is where the two texts
    first say different things (after the text they share); the chosen side's text comes back
    whole, its compared part under return_text='scored'."""
    d = tm.arbitrate("Who designed the Zelvora Bridge?", PASSAGES, direct_answer=CHAT_DIRECT,
                     rag_answer=CHAT_RAG)
    assert d.reason not in ("answers_agree",) and d.m is not None
    assert d.direct_answer == "Gustave Eiffel"
    assert d.rag_answer == "Marta Okonkwo in 1987"
    assert [CHAT_DIRECT[s:e] for s, e in d.direct_spans or []] == ["Gustave Eiffel"]
    assert [CHAT_RAG[s:e] for s, e in d.rag_spans or []] == ["Marta Okonkwo in 1987"]
    assert d.answer == (CHAT_RAG if d.source == "rag" else CHAT_DIRECT)
    assert (d.direct_raw, d.rag_raw) == (CHAT_DIRECT, CHAT_RAG)
    scored = TrustMargin(tm.backend, TrustMarginConfig(return_text="scored")).arbitrate(
        "Who designed the Zelvora Bridge?", PASSAGES, direct_answer=CHAT_DIRECT,
        rag_answer=CHAT_RAG)
    assert scored.answer == (d.rag_answer if d.source == "rag" else d.direct_answer)
    assert scored.m == d.m


def test_markdown_labels_never_decide(tm: TrustMargin) -> None:
    d = tm.arbitrate("Who designed the Zelvora Bridge?", PASSAGES,
                     direct_answer="**Answer:** Marta Okonkwo",
                     rag_answer="### Answer\nMarta Okonkwo.")
    assert d.reason == "answers_agree" and d.answer == "### Answer\nMarta Okonkwo."
    # Every word is equal (markdown marks and punctuation aside): nothing differs to score.
    assert (d.direct_answer, d.rag_answer) == ("**Answer:** Marta Okonkwo",
                                               "### Answer\nMarta Okonkwo.")
    assert d.direct_spans is None and d.m is None


@pytest.mark.slow
def test_answer_runs_the_whole_pipeline_over_a_retriever(tm: TrustMargin) -> None:
    from trustmargin_integrations import BM25Index

    index = BM25Index.build([Passage(id=f"p{i}", title=f"T{i}", text=t)
                             for i, t in enumerate(PASSAGES)])
    d = tm.answer("Who designed the Zelvora Bridge?", index, k=1)
    assert d.direct_generated and d.rag_generated and d.passages_used == 1
    assert d.passages[0].id == "p0" and d.passages[0].score is not None
    # Given back as texts, the two short answers are scored whole under the paper form (the
    # paper's scoring of a short answer); the default compares where they differ.
    short = TrustMargin(tm.backend, TrustMarginConfig(scoring_form="paper"))
    same = short.arbitrate("Who designed the Zelvora Bridge?", index.search(
        "Who designed the Zelvora Bridge?", 1), d.direct_answer, d.rag_answer)
    assert same.m == pytest.approx(d.m, abs=1e-5)
    nothing = tm.answer("Qwxyz vbnm?", index, k=2)
    assert nothing.reason == "no_evidence" and nothing.answer == nothing.direct_answer
    with pytest.raises(InvalidInputError, match="search"):
        tm.answer("q?", object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError) as info:
        tm.answer_batch(["ok?", " "], index)
    assert info.value.field == "questions[1]"


def test_missing_model_path_is_a_clear_error() -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        HFBackend.load("./no/such/model-dir")
    with pytest.raises(ModelLoadError, match="does not exist"):
        HFBackend.load("/tmp/definitely-missing.gguf")


def test_window_errors_use_the_callers_field_names(tm: TrustMargin) -> None:
    """Errors raised while fitting the model's window name fields like every other
    validation error: the batch place and the adapter's own key names."""
    item = {"question": "q?", "passages": ["p"], "rag_answer": "word " * 5000}
    with pytest.raises(InvalidInputError) as err:
        tm.prepare(item, where="inputs[2]", names={"rag_answer": "rag"})
    assert err.value.field == "inputs[2].rag"
    with pytest.raises(InvalidInputError) as err:
        tm.prepare({"question": "why " * 9000, "passages": ["p"]},
                   names={"question": "query"})
    assert err.value.field == "query"


def test_rearbitrating_a_prepared_question_records_its_warnings_once(tm: TrustMargin) -> None:
    short = TrustMargin(tm.backend, TrustMarginConfig(scoring_form="paper"))
    prepared = short.prepare({"question": QUESTION, "passages": [PASSAGE],
                               "direct_answer": "Sure! Gustave Eiffel.\n\nMore.",
                               "rag_answer": "Marta Okonkwo"})
    first = short.arbitrate_batch([prepared])[0]
    again = short.arbitrate_batch([prepared])[0]
    assert any("direct_answer: scored on its short form" in w for w in first.warnings)
    assert again.warnings == first.warnings
    assert (again.m, again.answer) == (first.m, first.answer)
