"""A user's labeled questions as their framework keeps them: LangSmith examples and LlamaIndex
evaluation datasets read by the same loader as our JSONL."""

from __future__ import annotations

import datetime
import json
import uuid
from pathlib import Path

import pytest
from langsmith.schemas import Example

from trustmargin_integrations import InvalidInputError
from trustmargin_integrations.evaluation.datasets import load_examples


def test_langsmith_examples_are_labeled_questions(tmp_path: Path) -> None:
    """Real ``langsmith.schemas.Example`` objects, dumped as a dataset export writes them."""
    now = datetime.datetime(2026, 1, 1)
    dataset = uuid.uuid4()
    examples = [
        Example(id=uuid.uuid4(), dataset_id=dataset, created_at=now,
                inputs={"question": "Who designed the Zelvora Bridge?"},
                outputs={"answer": "Marta Okonkwo"}),
        Example(id=uuid.uuid4(), dataset_id=dataset, created_at=now,
                inputs={"input": "Where is it?", "context": ["It spans the Vel river."]},
                outputs={"output": ["Velmora", "the Vel valley"]}),
    ]
    path = tmp_path / "langsmith.jsonl"
    path.write_text("".join(e.model_dump_json() + "\n" for e in examples), encoding="utf-8")
    loaded = load_examples(path)
    assert [(e.id, e.question, e.answers) for e in loaded] == [
        (str(examples[0].id), "Who designed the Zelvora Bridge?", ("Marta Okonkwo",)),
        (str(examples[1].id), "Where is it?", ("Velmora", "the Vel valley"))]
    assert loaded[0].passages is None
    assert [p.text for p in loaded[1].passages or ()] == ["It spans the Vel river."]


def test_a_langsmith_example_without_an_answer_names_it(tmp_path: Path) -> None:
    path = tmp_path / "langsmith.json"
    path.write_text(json.dumps([{"inputs": {"question": "Q?"}, "outputs": {"score": 1}}]),
                    encoding="utf-8")
    with pytest.raises(InvalidInputError) as err:
        load_examples(path)
    assert err.value.field == "langsmith.json[0].answer"


def test_a_llama_index_query_response_dataset_is_labeled_questions(tmp_path: Path) -> None:
    """A real ``QueryResponseDataset`` saved with its own ``save_json``."""
    from llama_index.core.evaluation import QueryResponseDataset

    with pytest.warns(DeprecationWarning):  # deprecated by LlamaIndex, still in use
        data = QueryResponseDataset(queries={"q1": "Who designed it?", "q2": "When?"},
                                    responses={"q1": "Marta Okonkwo", "q2": "1962"})
    path = tmp_path / "qr.json"
    data.save_json(str(path))
    loaded = load_examples(path)
    assert [(e.id, e.question, e.answers) for e in loaded] == [
        ("q1", "Who designed it?", ("Marta Okonkwo",)), ("q2", "When?", ("1962",))]


def test_a_labelled_rag_dataset_file_keeps_its_gold_contexts_out(tmp_path: Path) -> None:
    """``LabelledRagDataset.save_json``'s shape, written by hand: the class is not in the
    installed llama-index-core (0.14). Reference contexts are the text a question was written
    from, so they are not taken as retrieved passages."""
    path = tmp_path / "rag.json"
    path.write_text(json.dumps({"examples": [{
        "query": "Who designed it?", "query_by": {"type": "human", "model_name": ""},
        "reference_contexts": ["The bridge was designed by Marta Okonkwo."],
        "reference_answer": "Marta Okonkwo",
        "reference_answer_by": {"type": "human", "model_name": ""}}]}), encoding="utf-8")
    (example,) = load_examples(path)
    assert (example.question, example.answers, example.passages) == (
        "Who designed it?", ("Marta Okonkwo",), None)
    path.write_text(json.dumps({"rows": []}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="LlamaIndex dataset"):
        load_examples(path)
