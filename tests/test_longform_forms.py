"""The long-form evaluation: chat answers generated once, arbitrated under every scoring form,
stored as they finish and read back on a rerun; the table reports every form. Real embedded
model and shared benchmark questions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trustmargin_integrations import TrustMargin
from trustmargin_integrations.evaluation.datasets import load_dataset
from trustmargin_integrations.evaluation.longform import FORMS, longform_table, run_longform

DATA_DIR = Path(os.environ.get("TRUSTMARGIN_DATA")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "raw")


@pytest.mark.slow
def test_every_form_from_one_generation_and_resumed(tm: TrustMargin, tmp_path: Path) -> None:
    examples = load_dataset("cwq", DATA_DIR)[:2]
    store = tmp_path / "longform.jsonl"
    records = run_longform(tm, examples, store, max_new_tokens=24, progress=False)
    assert [r.example.id for r in records] == [e.id for e in examples]
    for record in records:
        assert set(record.decisions) == set(FORMS)
        for form, decision in record.decisions.items():
            # Both texts were given: the chosen one comes back whole, under every form.
            assert decision.answer in (record.direct_text, record.rag_text)
            assert decision.scoring_form in (form, "differential")  # extract may fall back
    before = store.read_text(encoding="utf-8")
    again = run_longform(tm, examples, store, max_new_tokens=24, progress=False)
    assert store.read_text(encoding="utf-8") == before  # nothing recomputed
    assert [r.decisions["differential"].m for r in again] == [
        r.decisions["differential"].m for r in records]
    table = "\n".join(longform_table(records, "cwq (n = 2)"))
    assert all(f"tm:{form}" in table for form in FORMS)
    assert "Small sample" in table or "small sample" in table
