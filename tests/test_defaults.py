"""Defaults a user can trust and one style at every adapter edge.

Real parts: the embedded SmolLM2 model (the session's ``backend``), the shipped policy files,
real LangChain and LlamaIndex objects, a real Jupyter kernel for the notebook check. Where a
test loads "a model" by name, the loader is replaced by the session's model (the object is the
real one; what is tested is what ``from_pretrained`` does around the load).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import nbformat
import pytest
from cli_support import run_main
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from llama_index.core import Document as LlamaDocument
from llama_index.core import SummaryIndex
from notebook_support import execute_notebook

import trustmargin_integrations.langchain as lc
import trustmargin_integrations.llama_index as li
from trustmargin_integrations import policy_file
from trustmargin_integrations.arbiter import TrustMargin, core
from trustmargin_integrations.backends import loading
from trustmargin_integrations.backends.spec import BackendSpec
from trustmargin_integrations.config import (
    CHAT_MAX_NEW_TOKENS,
    CHAT_MAX_NEW_TOKENS_LIMIT,
    TrustMarginConfig,
)
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    LocalChatModel,
    LocalLLM,
    TrustMarginRetriever,
    TrustMarginRouter,
    build_trustmargin_chain,
    with_trustmargin,
)
from trustmargin_integrations.llama_index import (
    LocalLlamaIndexLLM,
    PassageRetriever,
    TrustMarginQueryEngine,
    TrustMarginRetrieverQueryEngine,
)
from trustmargin_integrations.policy_file import PolicyFile, shipped_path
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Passage

QUESTION = "Who designed the Velmora Bridge?"
PASSAGE = "The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."
# What the embedded model answers closed-book (a confident hallucination) and with the passage,
# measured with docs/llamaindex.md's first example: the paper's rule keeps the hallucination.
HALLUCINATION = ("The Velmora Bridge was designed by the Italian architect and engineer, "
                 "Alessandro Velmeli.")
RETRIEVED = PASSAGE


@pytest.fixture
def loads(backend: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """``from_pretrained``'s loader, replaced by the session's model; the calls it got."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def load_backend(model: Any = "smollm2-135m", field: str = "model", **kwargs: Any) -> Any:
        spec = BackendSpec.coerce(model, field)
        assert spec.kind == "hf"  # every load here is of the local embedded model
        calls.append((spec.model, kwargs))
        return backend

    monkeypatch.setattr(core, "load_backend", load_backend)
    monkeypatch.setattr(loading, "load_backend", load_backend)  # the CLI's factory
    monkeypatch.setattr(policy_file, "_TOLD", set())  # each test sees its own first load
    return calls


# -- the shipped policy by default, the paper's rule when asked -------------------------------


def test_a_named_model_loads_its_shipped_policy_unless_the_paper_rule_is_asked_for(
        loads: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    shipped = PolicyFile.load(shipped_path("smollm2-135m")).apply()
    with caplog.at_level(logging.WARNING):
        tm = TrustMargin.from_pretrained()
    assert tm.config == shipped and tm.config.policy == "always_rag"
    assert caplog.records == []  # a shipped policy needs no warning
    # The paper's rule, asked for explicitly.
    assert TrustMargin.from_pretrained(calibration=None).config == TrustMarginConfig()
    # A config that sets the rule itself keeps it; one that sets other fields gets the policy.
    own = TrustMargin.from_pretrained(config=TrustMarginConfig(tau=-2.0))
    assert (own.config.policy, own.config.tau) == ("rule", -2.0)
    sized = TrustMargin.from_pretrained(config=TrustMarginConfig(top_k=2))
    assert (sized.config.policy, sized.config.top_k) == ("always_rag", 2)
    assert [model for model, _ in loads] == ["smollm2-135m"] * 4


def test_a_model_without_a_shipped_policy_gets_the_paper_rule_and_says_so_once(
        loads: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations"):
        first = TrustMargin.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")
        second = TrustMargin.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")
        TrustMargin.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct", calibration=None)
    assert first.config == second.config == TrustMarginConfig()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said  # once, at the first load
    assert "No decision policy is shipped" in said[0] and "trustmargin check" in said[0]
    assert "calibration=None" in said[0]


@pytest.mark.slow
def test_the_default_keeps_the_retrieved_answer_where_the_paper_rule_keeps_a_hallucination(
        loads: list[Any]) -> None:
    # The answers docs/llamaindex.md's first example produced, routed by a real LangChain
    # router on the real model: the paper's rule keeps the closed-book hallucination, the
    # model's shipped policy (the domain check's verdict) the retrieved answer.
    item = {"question": QUESTION, "direct_answer": HALLUCINATION, "rag_answer": RETRIEVED,
            "context": [PASSAGE]}
    default = TrustMarginRouter(TrustMargin.from_pretrained()).invoke(item)
    paper = TrustMarginRouter(TrustMargin.from_pretrained(calibration=None)).invoke(item)
    assert (paper.source, paper.answer) == ("direct", HALLUCINATION)
    assert (default.source, default.answer) == ("rag", RETRIEVED)
    # The shipped policy ignores the margins, so nothing was scored for it: no margins and
    # no paper's choice in the record, and a warning that says why.
    assert default.paper_choice is None and default.m_prior is None and default.m is None
    assert any(w.startswith("margins not computed") for w in default.warnings)
    assert paper.m_prior is not None


@pytest.mark.slow
def test_eval_reproduces_the_paper_with_its_rule(loads: list[Any], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[TrustMargin] = []
    real = TrustMargin.__init__

    def spy(self: TrustMargin, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(TrustMargin, "__init__", spy)
    data = tmp_path / "one.json"
    data.write_text('[{"test_id": 1, "question": "Who designed the Velmora Bridge?", '
                    '"answer": "Tomas Rilke", "passages": ["' + PASSAGE + '"]}]')
    run = run_main("eval", "--dataset", str(data), "--run-dir", str(tmp_path / "run"),
                   "--noise-limit", "0", "--no-report")
    assert run.exit_code == 0, run.output
    # Every arbiter eval builds (its own, and the one for short answers given back) applies
    # the paper's rule with the paper's numbers, not the model's shipped policy.
    assert made and len(loads) == 1
    assert all((tm.config.policy, tm.config.tau, tm.config.lambda_bind) == ("rule", -1.5, 0.5)
               for tm in made)


# -- quiet loads, no warnings in notebooks ----------------------------------------------------


def test_a_model_load_prints_no_progress_bar(capfd: pytest.CaptureFixture[str]) -> None:
    from trustmargin_integrations.backends.hf import HFBackend

    HFBackend.load("smollm2-135m", device="cpu", dtype="float32")
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out


@pytest.mark.slow
def test_a_notebook_loads_the_model_without_a_warning_or_a_bar(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from trustmargin_integrations import TrustMargin\n"
        "tm = TrustMargin.from_pretrained()\n"
        "print('ready', tm.config.policy)")]
    execute_notebook(nb, tmp_path, timeout=300)
    outputs = nb.cells[0].outputs
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "ready always_rag" in text
    stderr = "".join(o.get("text", "") for o in outputs
                     if o.output_type == "stream" and o.get("name") == "stderr")
    assert stderr == "", stderr  # no TqdmWarning, no "Loading weights" bar


# -- one error type, one name, one argument style ---------------------------------------------


def test_every_adapter_edge_raises_invalid_input_error(tm: TrustMargin, backend: Any) -> None:
    index = BM25Index.build([Passage(id="v", title="Velmora Bridge", text=PASSAGE)])
    chain = ({"context": TrustMarginRetriever(index, k=1), "question": RunnablePassthrough()}
             | ChatPromptTemplate.from_messages([("human", "{context}\n{question}")])
             | LocalChatModel(backend=backend) | StrOutputParser())
    inner = SummaryIndex.from_documents([LlamaDocument(text=PASSAGE)]).as_query_engine(
        llm=LocalLlamaIndexLLM(backend=backend))
    cases = [
        (lambda: TrustMarginRetriever(retriever=object()), "retriever"),
        (lambda: TrustMarginRetriever(object()), "retriever"),
        (lambda: TrustMarginRetriever(index, k=0), "k"),
        (lambda: with_trustmargin(chain, None), "tm"),
        (lambda: TrustMarginRouter(tm=None), "tm"),
        (lambda: TrustMarginRouter(tm, tau=math.nan), "tau"),
        (lambda: TrustMarginRouter(tm, tm=tm), "tm"),
        (lambda: build_trustmargin_chain(index, "not an arbiter"), "tm"),
        (lambda: LocalChatModel(backend=object()), "backend"),
        (lambda: LocalLLM(backend=backend, max_new_tokens=0), "max_new_tokens"),
        (lambda: LocalChatModel.from_trustmargin(None), "tm"),
        (lambda: LocalLlamaIndexLLM(backend=backend, max_new_tokens=0), "max_new_tokens"),
        (lambda: LocalLlamaIndexLLM.from_trustmargin(None), "tm"),
        (lambda: TrustMarginQueryEngine(inner, None), "tm"),
        (lambda: TrustMarginRetrieverQueryEngine(index, None), "tm"),
        (lambda: PassageRetriever(index, similarity_top_k=0), "similarity_top_k"),
    ]
    for make, field in cases:
        with pytest.raises(InvalidInputError) as err:
            make()
        assert err.value.field == field, (field, err.value)
        assert "Fix:" in str(err.value)


def test_the_builders_take_the_wrapped_object_and_the_arbiter_positionally(
        tm: TrustMargin) -> None:
    index = BM25Index.build([Passage(id="v", title="Velmora Bridge", text=PASSAGE)])
    retriever = TrustMarginRetriever(index, k=1)  # positional, like PipelineRetriever(p)
    assert retriever.retriever is index and retriever.k == 1
    assert TrustMarginRouter(tm).tm is tm  # positional, like TrustMarginQueryEngine(qe, tm)
    llm = LocalLLM.from_trustmargin(tm, max_new_tokens=4)
    with pytest.raises(TypeError):  # the candidates are keywords
        build_trustmargin_chain(index, llm, llm, TrustMarginRouter(tm))  # type: ignore[misc]
    with pytest.raises(TypeError):  # options are keywords
        TrustMarginRetrieverQueryEngine(index, tm, 2)  # type: ignore[misc]


def test_one_name_per_class_across_both_adapters() -> None:
    langchain_classes = {n for n in lc.__all__ if isinstance(getattr(lc, n), type)}
    llama_classes = {n for n in li.__all__ if isinstance(getattr(li, n), type)}
    assert langchain_classes & llama_classes == set()
    assert "LocalLlamaIndexLLM" in llama_classes and "LocalLLM" in langchain_classes


def test_the_llm_wrappers_share_one_default_and_one_limit(backend: Any) -> None:
    for cls in (LocalLLM, LocalChatModel, LocalLlamaIndexLLM):
        assert cls(backend=backend).max_new_tokens == CHAT_MAX_NEW_TOKENS
        assert cls(backend=backend, max_new_tokens=CHAT_MAX_NEW_TOKENS_LIMIT)
        with pytest.raises(InvalidInputError, match="max_new_tokens"):
            cls(backend=backend, max_new_tokens=CHAT_MAX_NEW_TOKENS_LIMIT + 1)


@pytest.mark.parametrize("nothing", [[], "", "  \n"])
def test_an_empty_context_string_means_no_evidence_like_an_empty_list(
        tm: TrustMargin, nothing: Any) -> None:
    decision = TrustMarginRouter(tm).invoke({"question": QUESTION, "direct_answer": "Eiffel",
                                             "rag_answer": "Rilke", "context": nothing})
    assert (decision.reason, decision.source, decision.answer) == ("no_evidence", "direct",
                                                                   "Eiffel")
    with pytest.raises(InvalidInputError) as err:  # a blank passage in a list still is not
        TrustMarginRouter(tm).invoke({"question": QUESTION, "direct_answer": "Eiffel",
                                      "rag_answer": "Rilke", "context": [PASSAGE, " "]})
    assert err.value.field == "context[1]"
