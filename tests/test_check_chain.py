"""``trustmargin check --chain MODULE:ATTR LABELED`` and ``check_chain()``: the check from a
chain in one step. Real parts throughout: a LangChain RAG chain (real BM25 retriever over the
demo corpus, the embedded SmolLM2 as its chat model) and a LlamaIndex ``RetrieverQueryEngine``
(the same BM25 and model), run closed-book and as deployed by TrustMargin's own adapters,
answers stored resumably, records written and checked; LangSmith examples as the
``langsmith`` package dumps them. The chain's chat model is the session's embedded model
(``HFBackend.load`` returns the loaded one, so nothing loads twice); four labeled questions
and two folds keep each run to seconds of generation.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_support import DEMO, run_main
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langsmith.schemas import Example

from trustmargin_integrations import check_chain
from trustmargin_integrations.answering import other_model_warning
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.cli.chain_answers import ANSWERS_FILE, RECORDS_FILE
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import load_examples
from trustmargin_integrations.policy_file import PolicyFile

IDS = ("q00", "q01", "q02", "q04")

CHAIN_MODULE = '''
from pathlib import Path

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from trustmargin_integrations import BM25Index, TrustMargin
from trustmargin_integrations.langchain import LocalChatModel, TrustMarginRetriever

CALLS = []  # every answer the chain returned, either side
FAIL_ON = set()  # questions the chain fails on (a crash mid-run)
tm = TrustMargin.from_pretrained()
retriever = TrustMarginRetriever(retriever=BM25Index.from_corpus({corpus!r}), k=2)
prompt = ChatPromptTemplate.from_messages([
    ("system", "Answer in a few words using the context.\\n\\nContext:\\n{{context}}"),
    ("human", "{{question}}")])


def format_docs(docs):
    return "\\n\\n".join(d.page_content for d in docs)


def asked(question):
    if question in FAIL_ON:
        raise RuntimeError("the chain's server went away")
    return question


def counted(text):
    CALLS.append(text)
    return text


chain = ({{"context": retriever | format_docs,
          "question": RunnableLambda(asked) | RunnablePassthrough()}}
         | prompt | LocalChatModel.from_trustmargin(tm, max_new_tokens=10)
         | StrOutputParser() | RunnableLambda(counted))
'''

ENGINE_MODULE = '''
from llama_index.core.query_engine import RetrieverQueryEngine

from trustmargin_integrations import BM25Index, TrustMargin
from trustmargin_integrations.llama_index import LocalLlamaIndexLLM, PassageRetriever

tm = TrustMargin.from_pretrained()


def make_engine():
    retriever = PassageRetriever(BM25Index.from_corpus({corpus!r}), similarity_top_k=2)
    return RetrieverQueryEngine.from_args(
        retriever, llm=LocalLlamaIndexLLM.from_trustmargin(tm, max_new_tokens=10))
'''


HOSTED_MODULE = '''
from itertools import cycle

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from trustmargin_integrations import BM25Index
from trustmargin_integrations.langchain import TrustMarginRetriever


class HostedChat(GenericFakeChatModel):
    model_name: str = "gpt-4o-mini"


retriever = TrustMarginRetriever(retriever=BM25Index.from_corpus({corpus!r}), k=2)
prompt = ChatPromptTemplate.from_messages([("system", "Context: {{context}}"),
                                           ("human", "{{question}}")])
chain = ({{"context": retriever, "question": RunnablePassthrough()}} | prompt
         | HostedChat(messages=cycle([AIMessage(content="It is Marta Okonkwo."),
                                      AIMessage(content="It opened in 1987.")])))
'''


@pytest.fixture
def one_model(tm: TrustMargin, monkeypatch: pytest.MonkeyPatch) -> TrustMargin:
    """The session's embedded model wherever a chain module or the check loads one."""
    from trustmargin_integrations.backends.hf import HFBackend

    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    return tm


def _labeled(path: Path, ids: tuple[str, ...] = IDS, **extra: Any) -> list[dict[str, Any]]:
    questions = {q["id"]: q for q in json.loads((DEMO / "questions.json").read_text())}
    records = [{"id": i, "question": questions[i]["question"],
                "answers": questions[i]["answers"], **extra} for i in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return records


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Any:
    """A user's module in tmp_path, importable by name (as on PYTHONPATH)."""
    (tmp_path / f"{name}.py").write_text(
        source.format(corpus=str(DEMO / "corpus.json")), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    __import__(name)
    return sys.modules[name]


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in
            (run_dir / RECORDS_FILE).read_text(encoding="utf-8").splitlines()]


def _check_records(records: list[dict[str, Any]], labeled: list[dict[str, Any]]) -> None:
    """One record per labeled question, its gold kept, both answers and passages given."""
    assert [(r["id"], r["question"], r["answers"]) for r in records] == [
        (r["id"], r["question"], r["answers"]) for r in labeled]
    for r in records:
        assert r["direct_answer"].strip() and r["rag_answer"].strip()
        assert r["passages"] and all(p.strip() for p in r["passages"])
    # The deployed side saw the passages, the closed-book side did not: different texts.
    assert any(r["direct_answer"] != r["rag_answer"] for r in records)


# -- labeled files in the frameworks' shapes --------------------------------------------------


def _example(question: str, outputs: dict[str, Any]) -> Example:
    return Example(id=uuid.uuid4(), dataset_id=uuid.uuid4(),
                   created_at=datetime.datetime(2026, 1, 1),
                   inputs={"question": question}, outputs=outputs)


def test_langsmith_examples_carry_the_chains_answers_or_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "langsmith.jsonl"
    given = _example("Who designed it?", {"answer": "Marta Okonkwo",
                                          "direct_answer": "I think Eiffel.",
                                          "rag_answer": "Marta Okonkwo designed it."})
    path.write_text(given.model_dump_json() + "\n", encoding="utf-8")
    (example,) = load_examples(path)
    assert example.chain is not None
    assert (example.chain.direct, example.chain.rag) == ("I think Eiffel.",
                                                         "Marta Okonkwo designed it.")
    # An answer under a key the check does not read is refused, naming it: never a check
    # fitted silently on the scorer's own answers instead.
    path.write_text(_example("Who designed it?", {"answer": "Marta Okonkwo",
                                                  "prediction": "Eiffel"}).model_dump_json()
                    + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as err:
        load_examples(path)
    assert err.value.field == "langsmith.jsonl:1.outputs.prediction"
    path.write_text(_example("Who?", {"answer": "Ada", "rag_answer": "Ada."}).model_dump_json()
                    + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as err:
        load_examples(path)
    assert err.value.field == "langsmith.jsonl:1.direct_answer"


def test_llama_index_files_carry_the_chains_answers_or_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "rag.json"
    path.write_text(json.dumps({"examples": [{
        "query": "Who designed it?", "reference_answer": "Marta Okonkwo",
        "reference_contexts": ["The bridge was designed by Marta Okonkwo."],
        "direct_answer": "Eiffel.", "rag_answer": "Marta Okonkwo."}]}), encoding="utf-8")
    (example,) = load_examples(path)
    assert example.chain is not None and example.chain.rag == "Marta Okonkwo."
    # A prediction dataset (one answer per question, no gold) names its field.
    path.write_text(json.dumps({"predictions": [{"response": "Eiffel", "contexts": []}]}),
                    encoding="utf-8")
    with pytest.raises(InvalidInputError) as err:
        load_examples(path)
    assert err.value.field == "rag.json.predictions" and "--chain" in err.value.fix


@pytest.mark.slow
def test_langsmith_records_with_answers_are_checked_on_them(one_model: TrustMargin,
                                                           tmp_path: Path) -> None:
    """Issue 34: LangSmith-shaped records carrying the chain's answers were checked on the
    scorer's own answers (``scoring_form: null``). They are checked on the chain's."""
    questions = {q["id"]: q for q in json.loads((DEMO / "questions.json").read_text())}
    lines = []
    for n, ident in enumerate(IDS):
        q = questions[ident]
        wrong = questions[IDS[(n + 1) % len(IDS)]]["answers"][0]
        lines.append(json.dumps({"inputs": {"question": q["question"]}, "outputs": {
            "answer": q["answers"][0], "direct_answer": f"It is {wrong}.",
            "rag_answer": f"It is {q['answers'][0]}."}}))
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_main("check", str(path), "--corpus", str(DEMO / "corpus.json"),
                      "--folds", "2", "--resamples", "200")
    assert result.exit_code == 0, result.output
    assert "answers: your chain's own (direct_answer, rag_answer)" in result.output
    policy = PolicyFile.load(tmp_path / "export.jsonl.check" / "policy.json")
    assert policy.scoring_form == "auto"


# -- refusals before anything runs -----------------------------------------------------------


def test_check_chain_refuses_before_the_chain_runs(one_model: TrustMargin, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, monkeypatch, "refused_rag", CHAIN_MODULE)
    spec = "refused_rag:chain"
    answered = tmp_path / "answered.jsonl"
    _labeled(answered, direct_answer="Eiffel.", rag_answer="Okonkwo.")
    result = run_main("check", "--chain", spec, str(answered), "--folds", "2")
    assert result.exit_code == 2 and "answered.jsonl[q00].direct_answer" in result.output
    with_passages = tmp_path / "passages.jsonl"
    _labeled(with_passages, passages=["The bridge was designed by Marta Okonkwo."])
    result = run_main("check", "--chain", spec, str(with_passages), "--folds", "2")
    assert result.exit_code == 2 and "passages.jsonl[q00].passages" in result.output
    labeled = tmp_path / "labeled.jsonl"
    _labeled(labeled)
    result = run_main("check", "--chain", spec, str(labeled), "--corpus",
                      str(DEMO / "corpus.json"))
    assert result.exit_code == 2 and "--chain" in result.output, result.output
    result = run_main("check", "--chain", spec, str(labeled))  # 4 questions, 5 folds
    assert result.exit_code == 2 and "--folds 2" in result.output, result.output
    for bad, says in (("refused_rag", "not 'module:attribute'"),
                      ("no_such_module_here:chain", "cannot be imported"),
                      ("refused_rag:nothing", "has no 'nothing'"),
                      ("refused_rag:CALLS", "is a list, not a LangChain Runnable")):
        result = run_main("check", "--chain", bad, str(labeled), "--folds", "2")
        assert result.exit_code == 2 and says in result.output, (bad, result.output)
    with pytest.raises(InvalidInputError) as err:
        check_chain(object(), labeled, tm=one_model, folds=2)
    assert err.value.field == "chain"
    assert module.CALLS == []
    assert not (tmp_path / "labeled.jsonl.check" / ANSWERS_FILE).exists()


# -- end to end --------------------------------------------------------------------------------


@pytest.mark.slow
def test_check_chain_cli_on_a_langchain_rag_chain(one_model: TrustMargin, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, monkeypatch, "user_rag", CHAIN_MODULE)
    labeled = _labeled(tmp_path / "labeled.jsonl")
    args = ["check", "--chain", "user_rag:chain", str(tmp_path / "labeled.jsonl"),
            "--folds", "2", "--resamples", "200"]
    result = run_main(*args)
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert "4 questions answered by RunnableSequence (smollm2-135m)" in shown
    assert "answers: your chain's own (direct_answer, rag_answer)" in shown
    # The chain's model is the scorer: no warning.
    assert "warning" not in result.output
    run_dir = tmp_path / "labeled.jsonl.check"
    _check_records(_records(run_dir), labeled)
    assert len(module.CALLS) == 2 * len(labeled)  # each question once per side
    policy = PolicyFile.load(run_dir / "policy.json")
    assert policy.scoring_form == "auto" and policy.evidence is not None
    # Run again: every answer and score comes from the run directory.
    again = run_main(*args)
    assert again.exit_code == 0 and "0 computed, 4 from cache" in again.output, again.output
    assert len(module.CALLS) == 2 * len(labeled)


@pytest.mark.slow
def test_check_chain_resumes_without_running_finished_questions_again(
        one_model: TrustMargin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, monkeypatch, "crashing_rag", CHAIN_MODULE)
    labeled = _labeled(tmp_path / "labeled.jsonl")
    module.FAIL_ON.add(labeled[2]["question"])
    with pytest.raises(RuntimeError, match="went away"):
        check_chain(module.chain, tmp_path / "labeled.jsonl", tm=one_model, folds=2,
                    resamples=200, progress=False)
    # Two questions finished before the crash (both sides each); the third failed.
    assert len(module.CALLS) == 4
    stored = (tmp_path / "labeled.jsonl.check" / ANSWERS_FILE).read_text().splitlines()
    assert len(stored) == 2
    module.FAIL_ON.clear()
    module.CALLS.clear()
    outcome = check_chain(module.chain, tmp_path / "labeled.jsonl", tm=one_model, folds=2,
                          resamples=200, progress=False)
    # Only the two questions not answered before ran, each once per side.
    assert len(module.CALLS) == 2 * 2
    assert outcome.policy == tmp_path / "labeled.jsonl.check" / "policy.json"
    assert outcome.calibration.scoring_form == "auto"
    assert outcome.result.n == len(labeled)
    _check_records(_records(outcome.run_dir), labeled)


@pytest.mark.slow
def test_check_chain_on_a_llama_index_query_engine(one_model: TrustMargin, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, monkeypatch, "user_engine", ENGINE_MODULE)
    labeled = _labeled(tmp_path / "labeled.jsonl")
    result = run_main("check", "--chain", "user_engine:make_engine",
                      str(tmp_path / "labeled.jsonl"), "--folds", "2", "--resamples", "200")
    assert result.exit_code == 0, result.output
    assert "answered by RetrieverQueryEngine (smollm2-135m)" in " ".join(result.output.split())
    cli_records = _records(tmp_path / "labeled.jsonl.check")
    _check_records(cli_records, labeled)
    assert PolicyFile.load(tmp_path / "labeled.jsonl.check" / "policy.json").scoring_form \
        == "auto"
    # The same from Python, on the engine object, into another run directory: the same
    # records (greedy decoding), the policy where it was asked for.
    outcome = check_chain(module.make_engine(), tmp_path / "labeled.jsonl", tm=one_model,
                          run_dir=tmp_path / "py", out=tmp_path / "policy.json", folds=2,
                          resamples=200, progress=False)
    assert outcome.policy == tmp_path / "policy.json" and outcome.policy.is_file()
    assert _records(tmp_path / "py") == cli_records


# -- the answering model is not the scorer ----------------------------------------------------


def test_another_answering_model_is_named_once(tm: TrustMargin,
                                               caplog: pytest.LogCaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The drop-in and the query engine warn once per pair of models, naming both; the
    embedded model answering is the scorer (no warning). A scripted chat model named like a
    hosted one, and LlamaIndex's MockLLM (no model name), stand in for hosted models (none
    can be reached here)."""
    from langchain_core.runnables import RunnableLambda
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    from trustmargin_integrations import BM25Index, answering
    from trustmargin_integrations.langchain import LocalChatModel, with_trustmargin
    from trustmargin_integrations.llama_index import (
        LocalLlamaIndexLLM,
        PassageRetriever,
        TrustMarginQueryEngine,
    )

    monkeypatch.setattr(answering, "_WARNED", set())  # this process's earlier warnings
    assert other_model_warning("HuggingFaceTB/SmolLM2-135M-Instruct",
                               "smollm2-135m-instruct") is None
    scorer = tm.backend.model_id

    class HostedChat(GenericFakeChatModel):
        model_name: str = "gpt-4o-mini"

    index = BM25Index.from_corpus(DEMO / "corpus.json")
    retrieve = RunnableLambda(lambda q: [])
    local = LocalLlamaIndexLLM.from_trustmargin(tm)
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations"):
        for llm in (HostedChat(messages=iter([AIMessage(content="x")])),
                    HostedChat(messages=iter([AIMessage(content="y")])),
                    LocalChatModel.from_trustmargin(tm)):
            with_trustmargin(None, tm, retriever=retrieve, prompt=RunnableLambda(str), llm=llm)
        for engine_llm in (local, MockLLM(), MockLLM()):
            TrustMarginQueryEngine(RetrieverQueryEngine.from_args(
                PassageRetriever(index), llm=engine_llm), tm, llm=engine_llm)
    warned = [r.getMessage() for r in caplog.records if r.name == "trustmargin_integrations"]
    assert len(warned) == 2, warned
    assert "answers with 'gpt-4o-mini'" in warned[0] and f"scores with {scorer!r}" in warned[0]
    assert "does not report" in warned[1] and f"scores with {scorer!r}" in warned[1]


@pytest.mark.slow
def test_check_chain_names_both_models_when_the_chain_answers_with_another(
        one_model: TrustMargin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A chain answering with a hosted model (scripted here: none can be reached; its
    answers are instant, so only the scoring takes time) is checked, with the warning."""
    from trustmargin_integrations import answering

    monkeypatch.setattr(answering, "_WARNED", set())
    _module(tmp_path, monkeypatch, "hosted_rag", HOSTED_MODULE)
    labeled = _labeled(tmp_path / "labeled.jsonl")
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations"):
        result = run_main("check", "--chain", "hosted_rag:chain",
                          str(tmp_path / "labeled.jsonl"), "--folds", "2", "--resamples", "200")
    assert result.exit_code == 0, result.output
    assert "answered by RunnableSequence (gpt-4o-mini)" in " ".join(result.output.split())
    warned = [r.getMessage() for r in caplog.records if r.name == "trustmargin_integrations"]
    assert len(warned) == 1, warned
    assert f"answers with 'gpt-4o-mini', but TrustMargin scores with " \
           f"{one_model.backend.model_id!r}" in warned[0]
    # The chain's own AIMessage texts were recorded, as it returned them.
    records = _records(tmp_path / "labeled.jsonl.check")
    assert [r["id"] for r in records] == [r["id"] for r in labeled]
    assert {r["rag_answer"] for r in records} | {r["direct_answer"] for r in records} == {
        "It is Marta Okonkwo.", "It opened in 1987."}
