"""The long-form evaluation: chat answers generated once, arbitrated under every scoring form,
stored as they finish and read back on a rerun; the table reports every form. Real embedded
model and shared benchmark questions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trustmargin_integrations import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import load_dataset, load_examples
from trustmargin_integrations.evaluation.longform import (
    FORMS,
    labeled_records,
    load_texts,
    longform_pooled_table,
    longform_table,
    methods,
    run_longform,
    save_texts,
)
from trustmargin_integrations.evaluation.metrics import token_f1

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
            # extract may fall back to difference; auto is extract or differential per pair.
            assert decision.scoring_form in ({"extract", "differential"} if form == "auto"
                                             else {form, "differential"})
    before = store.read_text(encoding="utf-8")
    again = run_longform(tm, examples, store, max_new_tokens=24, progress=False)
    assert store.read_text(encoding="utf-8") == before  # nothing recomputed
    assert [r.decisions["differential"].m for r in again] == [
        r.decisions["differential"].m for r in records]
    table = "\n".join(longform_table(records, "cwq (n = 2)"))
    assert all(f"tm:{form}" in table for form in FORMS)
    assert "Small sample" in table or "small sample" in table
    # Pooled over two "datasets" of one question each: a method's pooled score is the mean of
    # the per-dataset means, and the forms are compared with each other.
    pooled = longform_pooled_table({"a": records[:1], "b": records[1:]})
    f1_row = next(line for line in pooled if line.startswith("| token F1 | ") and "[" in line)
    cells = f1_row.strip("| ").split(" | ")[1:]
    rag_f1 = 50 * sum(token_f1(r.rag_text, r.example.answers) for r in records)
    assert cells[methods(FORMS).index("rag")].startswith(f"{rag_f1:.2f} [")
    assert " - ".join(f"tm:{f}" for f in FORMS[:2]) in "\n".join(pooled)
    assert "each resampled within itself" in "\n".join(pooled)
    # What a difference between two forms is made of: the questions where their kept texts
    # differ, and on which of those only one form's text holds a gold answer.
    a, b = FORMS[0], FORMS[1]
    differ = sum(r.decisions[a].answer != r.decisions[b].answer for r in records)
    assert (f"Kept texts differ between {a} and {b} on {differ} of 2 questions"
            in "\n".join(pooled))
    # The run as a labeled file of chain answers: what `trustmargin check` reads back.
    labeled = tmp_path / "cwq-chat.jsonl"
    labeled.write_text("".join(json.dumps(r) + "\n" for r in labeled_records(records)),
                       encoding="utf-8")
    read = load_examples(labeled)
    assert [(e.id, e.answers) for e in read] == [(r.example.id, r.example.answers)
                                                for r in records]
    assert [(e.chain.direct, e.chain.rag) for e in read if e.chain] == [
        (r.direct_text, r.rag_text) for r in records]
    assert [[p.as_context() for p in e.passages or ()] for e in read] == [
        [p.as_context() for p in r.example.passages or ()] for r in records]
    # The generations saved (no question text) and arbitrated again from the file, as a
    # scorer other than the answering model would: nothing is generated, same decisions.
    saved = tmp_path / "texts.jsonl"
    saved.write_text(save_texts(records, "some-other-model"), encoding="utf-8")
    assert records[0].example.question not in saved.read_text(encoding="utf-8")
    given = load_texts(saved)
    rescored = run_longform(tm, examples, tmp_path / "rescored.jsonl", forms=["differential"],
                            progress=False, given=given)
    assert [(r.direct_text, r.rag_text) for r in rescored] == [
        (r.direct_text, r.rag_text) for r in records]
    assert [r.decisions["differential"].m for r in rescored] == pytest.approx(
        [r.decisions["differential"].m for r in records], abs=1e-4)


def test_saved_generations_are_refused_when_they_are_not(tmp_path: Path) -> None:
    bad = tmp_path / "texts.jsonl"
    bad.write_text('{"dataset": "cwq", "id": "1"}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        load_texts(bad)
    assert info.value.field == f"{bad}:1"
