"""The scoring forms of a chain's texts other than the difference form: 'extract' (the model
states the short answer each text gives, checked to occur in it), 'auto' (the default: extract
with a scorer of 1B parameters or more, else the difference form) and 'paper' (the product's own
short answers given back). Real embedded model; the spy only records the calls the real backend
receives, and one spy declares another size (the one thing 'auto' reads of a scorer)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.spy_support import CallSpy
from trustmargin_integrations import Decision, TrustMargin, TrustMarginConfig
from trustmargin_integrations.arbiter.candidates import Candidate
from trustmargin_integrations.arbiter.comparisons import EXTRACTING_MIN_PARAMETERS, by_extraction
from trustmargin_integrations.backends.base import Capabilities
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.prompts import EXTRACT_TEMPLATE
from trustmargin_integrations.reading import stated_in

QUESTION = "In which district of Velmora does the Kessel bridge stand?"
PASSAGES = ["The Kessel bridge, finished in 1911, stands in the Weststadt district of Velmora.",
            "Velmora has two districts on the river: Oststadt and Weststadt."]
DIRECT = "Bien sûr ! The Kessel bridge stands in Oststadt."
RAG = "Bien sûr ! The Kessel bridge stands in Weststadt."


def test_stated_in_needs_the_words_together_and_in_order() -> None:
    assert stated_in("Weststadt", "It is in **Weststadt** [1].")
    assert stated_in("Weststadt district", "It stands in Weststadt District.")
    assert not stated_in("-5 °C", "It was 5 °C.") and stated_in("−5 °C", "It was -5 °C.")
    assert not stated_in("Weststadt district", "District: Weststadt")
    assert not stated_in("", "anything") and not stated_in("Oststadt", "Weststadt")


def test_extract_asks_once_per_chunk_and_never_invents_agreement(backend: HFBackend) -> None:
    spy = CallSpy(backend)
    tm = TrustMargin(spy, TrustMarginConfig(scoring_form="extract"))  # type: ignore[arg-type]
    decisions = tm.arbitrate_batch([
        {"question": QUESTION, "passages": PASSAGES, "direct_answer": DIRECT, "rag_answer": RAG},
        {"question": QUESTION, "passages": PASSAGES, "direct_answer": "Oststadt.",
         "rag_answer": "According to the context, it is in Weststadt [1]."}])
    # One generation call: every given text of the chunk, through the extraction prompt.
    assert len(spy.generated) == 1 and len(spy.generated[0]) == 4
    head = EXTRACT_TEMPLATE.split("{question}")[0]
    assert all(head in prompt and QUESTION in prompt for prompt in spy.generated[0])
    for d, texts in zip(decisions, [(DIRECT, RAG), ("Oststadt.", "According to the context, "
                                                     "it is in Weststadt [1].")], strict=True):
        assert d.source != "agree" and d.m is not None
        assert d.scoring_form in {"extract", "differential"}
        if d.scoring_form == "extract":
            # What was scored is stated in the text it was read from.
            assert stated_in(d.direct_answer, texts[0]) and stated_in(d.rag_answer, texts[1])
        else:
            assert "extraction not stated in its text; compared by difference" in d.warnings
        assert d.timings.comparing_s > 0


def test_only_texts_that_can_change_a_decision_are_extracted(backend: HFBackend) -> None:
    # Texts that read alike agree without their extractions: the model is not asked for them.
    spy = CallSpy(backend)
    tm = TrustMargin(spy, TrustMarginConfig(scoring_form="extract"))  # type: ignore[arg-type]
    alike, differ = tm.arbitrate_batch([
        {"question": QUESTION, "passages": PASSAGES, "direct_answer": "**Weststadt.**",
         "rag_answer": "weststadt"},
        {"question": QUESTION, "passages": PASSAGES, "direct_answer": DIRECT, "rag_answer": RAG}])
    assert alike.source == "agree" and alike.answer in {"**Weststadt.**", "weststadt"}
    assert differ.source != "agree"
    [prompts] = spy.generated
    # The differing pair's two texts, and nothing of the pair that reads alike.
    assert len(prompts) == 2
    assert sum(DIRECT in p for p in prompts) == 1 and sum(RAG in p for p in prompts) == 1



class _SizedAs(CallSpy):
    """The embedded model declaring another size: the one thing ``auto`` reads of a scorer to
    decide whether to ask it for extractions (every call still runs on the real model)."""

    def __init__(self, backend: HFBackend, parameters: int) -> None:
        super().__init__(backend)
        self._parameters = parameters

    @property
    def capabilities(self) -> Capabilities:
        return replace(self._backend.capabilities, parameters=self._parameters)


RESTATING = ("The Kessel bridge of Velmora stands in the Oststadt district.",
             "The Kessel bridge of Velmora stands in the Weststadt district.")
MIXED = ("I believe it is Oststadt, but I am not completely sure.",
         "According to the context, it is Weststadt [1].")
FRAMED = ("Hello! It is in Oststadt.", "Hello! It is in Weststadt.")


def _three_pairs(tm: TrustMargin) -> list[Decision]:
    return tm.arbitrate_batch([
        {"question": QUESTION, "passages": PASSAGES, "direct_answer": d, "rag_answer": r}
        for d, r in (RESTATING, MIXED, FRAMED)])


def test_auto_asks_a_scorer_that_states_short_answers_for_every_pair(backend: HFBackend
                                                                    ) -> None:
    # The default with a scorer sized as Qwen2.5-Coder-1.5B is the extract form: one
    # generation call for every given text of the chunk, as under scoring_form="extract".
    spy = _SizedAs(backend, 1_543_714_304)
    tm = TrustMargin(spy, TrustMarginConfig())  # type: ignore[arg-type]
    assert tm.config.scoring_form == "auto"
    decisions = _three_pairs(tm)
    [prompts] = spy.generated
    texts = (*RESTATING, *MIXED, *FRAMED)
    assert len(prompts) == 6 and all(QUESTION in p for p in prompts)
    assert sorted(t for p in prompts for t in texts if t in p) == sorted(texts)
    for d, pair in zip(decisions, (RESTATING, MIXED, FRAMED), strict=True):
        assert d.source != "agree" and d.m is not None
        if d.scoring_form == "extract":
            assert stated_in(d.direct_answer, pair[0]) and stated_in(d.rag_answer, pair[1])
        else:
            assert any("compared by difference" in w for w in d.warnings)


def test_auto_asks_a_small_scorer_for_no_extraction(backend: HFBackend) -> None:
    # The embedded model as it is (135M parameters): its extractions were measured unusable,
    # so the default compares every pair by difference, with no generation and no warning,
    # exactly as scoring_form="differential" does.
    assert backend.capabilities.parameters == backend.parameters < EXTRACTING_MIN_PARAMETERS
    spy = CallSpy(backend)
    auto = _three_pairs(TrustMargin(spy, TrustMarginConfig()))  # type: ignore[arg-type]
    assert spy.generated == []
    plain = _three_pairs(TrustMargin(backend, TrustMarginConfig(scoring_form="differential")))
    for a, d in zip(auto, plain, strict=True):
        assert a.scoring_form == d.scoring_form == "differential" and not a.warnings
        assert (a.direct_answer, a.rag_answer, a.source) == (d.direct_answer, d.rag_answer,
                                                             d.source)
        assert a.m == pytest.approx(d.m, abs=1e-4)

LIRA = "What Mediterranean country uses the Turkish lira as its currency?"
LIRA_TEXTS = ("Turkey uses the Turkish lira as its currency.",
              "Cyprus uses the Turkish lira as its currency.")


def _given(question: str, texts: tuple[str, str], stated: tuple[str, str]
           ) -> tuple[Candidate, Candidate, dict[tuple[str, str], str]]:
    direct, rag = (Candidate(t, None, generated=False) for t in texts)
    return direct, rag, {(question, t): s for t, s in zip(texts, stated, strict=True)}


def test_equal_extractions_that_repeat_the_question_are_not_agreement() -> None:
    # The extractions are Qwen2.5-Coder-1.5B's on these CWQ chat answers (measured in the
    # long-form benchmark): both texts read as the question's own "Turkish lira".
    compared = by_extraction(LIRA, *_given(LIRA, LIRA_TEXTS, ("Turkish lira", "Turkish lira")))
    assert not compared.agree and compared.form == "differential"
    assert (compared.direct_text, compared.rag_text) == ("Turkey", "Cyprus")
    # An answer among the question's options is still read and scored as extracted ...
    options = "Who was born earlier, Silas Hardy or Lee Mantle?"
    compared = by_extraction(options, *_given(
        options, ("Silas Hardy was born earlier.", "Lee Mantle was born first."),
        ("Silas Hardy", "Lee Mantle")))
    assert compared.form == "extract" and not compared.agree
    assert (compared.direct_text, compared.rag_text) == ("Silas Hardy", "Lee Mantle")
    # ... and equal extractions of texts that read differently are no agreement either: two
    # texts agree only when they read alike, so the pair is compared where the texts differ.
    brazil = "What country borders Bolivia and contains Goiás?"
    compared = by_extraction(brazil, *_given(
        brazil, ("Brazil borders Bolivia and contains Goiás.",
                 "The country that borders Bolivia and contains Goiás is Brazil."),
        ("Brazil", "Brazil")))
    assert compared.form == "differential" and not compared.agree
    assert compared.note == "equal extractions of different texts; compared by difference"
    # Texts that read alike agree without asking the extractor.
    compared = by_extraction(brazil, *_given(brazil, ("**Brazil.**", "brazil"), ("", "")))
    assert compared.agree



def test_an_extraction_that_restates_the_question_is_no_short_answer() -> None:
    # The embedded model's "extraction" of a chat text (measured): stated in its text, but the
    # question's sentence again, not a short answer. The pair is compared by difference.
    question = "Who designed the Velmora Bridge?"
    texts = ("Bien sûr ! The Velmora Bridge was designed by Gustave Eiffel.",
             "Bien sûr ! The Velmora Bridge was designed by Tomas Rilke.")
    compared = by_extraction(question, *_given(
        question, texts, ("Bien sûr ! The Velmora Bridge was designed by Gustave",
                          "Tomas Rilke")))
    assert compared.form == "differential" and not compared.agree
    assert compared.note == "extraction restates the question; compared by difference"
    assert (compared.direct_text, compared.rag_text) == ("Gustave Eiffel", "Tomas Rilke")
    # Short answers stated in their texts are scored as extracted.
    compared = by_extraction(question, *_given(question, texts, ("Gustave Eiffel",
                                                                 "Tomas Rilke")))
    assert compared.form == "extract" and compared.note is None

def test_extract_never_settles_the_lira_pair_as_agreement(tm: TrustMargin) -> None:
    extract = TrustMargin(tm.backend, TrustMarginConfig(scoring_form="extract"))
    d = extract.arbitrate(LIRA, ["Turkey uses the Turkish lira.", "Northern Cyprus uses it too."],
                          direct_answer=LIRA_TEXTS[0], rag_answer=LIRA_TEXTS[1])
    assert d.source != "agree" and d.m is not None
    assert (d.direct_raw or d.direct_answer, d.rag_raw or d.rag_answer) == LIRA_TEXTS


def test_generated_candidates_are_never_extracted(backend: HFBackend) -> None:
    spy = CallSpy(backend)
    tm = TrustMargin(spy, TrustMarginConfig(scoring_form="extract"))  # type: ignore[arg-type]
    d = tm.arbitrate(QUESTION, PASSAGES)
    assert d.scoring_form == "paper"
    # Only the two candidates' generations (Direct, then RAG): no extraction call.
    assert len(spy.generated) == 2


def test_the_paper_form_cuts_given_short_answers_as_generations_are_cut(tm: TrustMargin
                                                                        ) -> None:
    short = TrustMargin(tm.backend, TrustMarginConfig(scoring_form="paper"))
    d = short.arbitrate(QUESTION, PASSAGES, direct_answer="Answer: Oststadt.\nIt is old.",
                        rag_answer='"Weststadt"')
    assert d.scoring_form == "paper"
    assert (d.direct_answer, d.rag_answer) == ("Oststadt", "Weststadt")
    assert sum("scored on its short form" in w for w in d.warnings) == 2


def test_an_unknown_form_is_a_typed_error() -> None:
    from trustmargin_integrations.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="scoring_form"):
        TrustMarginConfig(scoring_form="first_line")  # type: ignore[arg-type]
