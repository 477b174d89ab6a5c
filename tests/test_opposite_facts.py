"""Opposite facts are never read as agreement, and formatting never decides: every pair the
hostile probe found is scored (in every scoring form of chat texts and in ``trustmargin score``),
the texts a reader reads alike agree, and what a reader does not see changes neither the
decision nor what was compared. Real embedded model (SmolLM2-135M)."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from score_support import Loader, score_settings, write_jsonl
from test_reading import OPPOSITE_FACTS, READER_IDENTICAL

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.score_file import run_score

QUESTION = "What does the record say?"
PASSAGES = ["The record was written in 1911 in the Weststadt district of Velmora."]
FORMS = ["differential", "extract"]


def _items(pairs: list[tuple[str, str]]) -> list[dict[str, object]]:
    return [{"question": QUESTION, "passages": PASSAGES, "direct_answer": d, "rag_answer": r}
            for d, r in pairs]


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
def test_every_opposite_pair_is_scored_never_agreed(tm: TrustMargin, form: str) -> None:
    arbiter = TrustMargin(tm.backend, TrustMarginConfig(scoring_form=form))  # type: ignore[arg-type]
    decisions = arbiter.arbitrate_batch(_items(OPPOSITE_FACTS))
    agreed = [(d.direct_raw or d.direct_answer, d.rag_raw or d.rag_answer)
              for d in decisions if d.source == "agree"]
    assert not agreed
    assert all(d.m is not None and d.reason in {"margin_above_tau", "margin_at_or_below_tau"}
               for d in decisions)
    # The user's text comes back whole, whichever side is kept.
    for d, (direct, rag) in zip(decisions, OPPOSITE_FACTS, strict=True):
        assert d.answer == (rag if d.source == "rag" else direct)


@pytest.mark.parametrize("form", FORMS)
def test_reader_identical_pairs_agree_without_scoring(tm: TrustMargin, form: str) -> None:
    arbiter = TrustMargin(tm.backend, TrustMarginConfig(scoring_form=form))  # type: ignore[arg-type]
    decisions = arbiter.arbitrate_batch(_items(READER_IDENTICAL))
    assert [d.source for d in decisions] == ["agree"] * len(READER_IDENTICAL)
    assert all(d.reason == "answers_agree" and d.m is None for d in decisions)


def test_the_grouped_number_does_not_hide_the_cities(tm: TrustMargin) -> None:
    d = tm.arbitrate("Where are the headquarters?", PASSAGES,
                     direct_answer="With 1,250 staff, the headquarters are in Zürich.",
                     rag_answer="With 1250 staff, the headquarters are in Geneva.")
    assert (d.direct_answer, d.rag_answer) == ("Zürich", "Geneva")
    hidden = tm.arbitrate("Where are the headquarters?", PASSAGES,
                          direct_answer="With 1,250 staff, the headquarters are in Zü\u200drich.",
                          rag_answer="With 1250 staff, the headquarters are in Geneva.")
    # A zero-width joiner inside a word changes nothing a reader sees: the same decision (the
    # same scored text; its numbers equal up to the batch's float noise).
    assert hidden.source == d.source and hidden.m == pytest.approx(d.m, abs=1e-4)


def test_what_a_reader_does_not_see_changes_no_decision(tm: TrustMargin) -> None:
    direct = "The 1,250 staff moved to **Oststadt** in 1911."
    rag = "The 1,250 staff moved to **Weststadt** in 1911."
    variants = [direct, "The 1250 staff moved to Oststadt in 1911.",
                unicodedata.normalize("NFD", direct).replace("Ost", "O\u00adst"),
                "The 1\u202f250 staff moved to *Ost\u200bstadt* in 1911."]
    decisions = tm.arbitrate_batch([{"question": "Where did the staff move?",
                                     "passages": PASSAGES, "direct_answer": v,
                                     "rag_answer": rag} for v in variants])
    first = decisions[0]
    assert first.m is not None
    for d, text in zip(decisions, variants, strict=True):
        # The same scored text: the same decision, its numbers equal up to float noise.
        assert d.source == first.source and d.m == pytest.approx(first.m, abs=1e-4)
        assert d.direct_likelihoods is not None and first.direct_likelihoods is not None
        assert d.direct_likelihoods.question_only == pytest.approx(
            first.direct_likelihoods.question_only, abs=1e-4)
        assert d.direct_spans is not None
        (start, end), = d.direct_spans
        assert unicodedata.normalize("NFC", text[start:end]).replace("\u00ad", "").replace(
            "\u200b", "") == "Oststadt"


@pytest.mark.slow
def test_score_never_agrees_on_opposite_facts(tm: TrustMargin, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "pairs.jsonl", _items(OPPOSITE_FACTS))
    out = tmp_path / "decisions.jsonl"
    run_score(source, out, score_settings(), Loader(tm), batch_size=8, progress=False)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(OPPOSITE_FACTS)
    assert not [r for r in rows if r["source"] == "agree"]
    assert all(r["m"] is not None for r in rows)
