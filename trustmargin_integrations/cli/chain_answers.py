"""Your chain's two answers to each labeled question, for ``trustmargin check --chain``.

The chain (a LangChain Runnable or a LlamaIndex query engine) is run as the adapters run it,
with nothing scored: as deployed (RAG, passages recorded) and closed-book. Answers go to a
resumable store in the run directory, so a rerun answers only what is missing; then the
labeled records with ``direct_answer``, ``rag_answer`` and ``passages`` are written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.files import write_text_atomic
from trustmargin_integrations.sides import BothAnswers
from trustmargin_integrations.store import ResultStore, cache_key

ANSWERS_FILE = "chain_answers.jsonl"
"""The run directory's store of the chain's answers (resumable, append-only)."""

RECORDS_FILE = "chain_records.jsonl"
"""The labeled records with the chain's answers, written for the check to read."""

_KINDS = "a LangChain Runnable or a LlamaIndex query engine"


@dataclass(frozen=True)
class ChainAnswerer:
    """A chain ready to answer both ways: ``answer(question)``, and how to name it (its
    class and the model it answers with)."""

    answer: Callable[[str], BothAnswers]
    label: str


def _runnable(value: Any) -> bool:
    try:
        from langchain_core.runnables import Runnable
    except ImportError:  # pragma: no cover - the langchain extra is not installed
        return False
    return isinstance(value, Runnable)


def _query_engine(value: Any) -> bool:
    try:
        from llama_index.core.base.base_query_engine import BaseQueryEngine
    except ImportError:  # pragma: no cover - the llama-index extra is not installed
        return False
    return isinstance(value, BaseQueryEngine)


def load_chain(spec: str) -> Any:
    """``--chain MODULE:ATTR``: the chain the module defines (or a factory's result, when
    ATTR is a function taking no argument), checked to be one this command runs."""
    from trustmargin_integrations.cli.common import import_spec

    value = import_spec(spec, "--chain", "my_app.rag:chain")
    if callable(value) and not (_runnable(value) or _query_engine(value)):
        value = value()
    if not (_runnable(value) or _query_engine(value)):
        raise InvalidInputError("--chain", f"{spec} is a {type(value).__name__}, not "
                                f"{_KINDS}", "name your chain (e.g. the LCEL chain you "
                                "invoke, or index.as_query_engine()), or a function "
                                "returning it")
    return value


def answerer(chain: Any, tm: TrustMargin, *, llm: Any = None, field: str = "chain"
             ) -> ChainAnswerer:
    """``chain`` wrapped to answer both ways through TrustMargin's adapter for it (the
    drop-in for a Runnable, the query engine wrapper for a query engine), nothing scored.
    The adapter logs the warning, naming both models, when the chain's model is not the
    scorer.

    Args:
        chain: a LangChain Runnable with a retriever in it, or a LlamaIndex query engine.
        tm: the scorer (only its model's name and settings are used here).
        llm: for a query engine, the LLM asked closed-book (default: the engine's own).
        field: how errors name ``chain``.
    """
    if _runnable(chain):
        from trustmargin_integrations.langchain.answering import answering_model
        from trustmargin_integrations.langchain.dropin import with_trustmargin

        if llm is not None:
            raise InvalidInputError("llm", "applies to a LlamaIndex query engine",
                                    "leave it out: your chain's own prompt and model answer "
                                    "closed-book (its retriever returning no documents)")
        guarded = with_trustmargin(chain, tm)
        name = answering_model(chain)

        def answer(question: str) -> BothAnswers:
            value = guarded.state_input({guarded.question_key: question})
            return guarded.both_answers(value)

        label = f"{type(chain).__name__} ({name or 'model not named'})"
    elif _query_engine(chain):
        from trustmargin_integrations.llama_index.answering import engine_llm, llm_name
        from trustmargin_integrations.llama_index.query_engine import TrustMarginQueryEngine

        closed = llm or engine_llm(chain)
        if closed is None:
            raise InvalidInputError("llm", f"{type(chain).__name__} keeps no LLM where "
                                    "LlamaIndex's response synthesizers keep it",
                                    "pass the LLM your engine answers with (llm=...)")
        engine = TrustMarginQueryEngine(chain, tm, llm=closed)
        name = llm_name(engine_llm(chain) or closed)
        answer = engine.both_answers
        label = f"{type(chain).__name__} ({name or 'model not named'})"
    else:
        raise InvalidInputError(field, f"is a {type(chain).__name__}, not {_KINDS}",
                                "pass your LCEL chain or your query engine")
    return ChainAnswerer(answer=answer, label=label)


def _key(question: str) -> str:
    # The question is the chain's whole input; the chain itself cannot be hashed, so a run
    # directory holds one chain's answers (documented: a changed chain needs a new one).
    return cache_key(model_id="chain", prompt_version="chain", question=question,
                     passages=(), settings={})


def answer_all(answerer: ChainAnswerer, examples: Sequence[EvalExample], run_dir: Path, *,
               batch_size: int = 1, progress: bool = True) -> list[BothAnswers]:
    """Each example's two answers, from the run directory's store where it holds them, else
    from the chain (``batch_size`` questions per durable chunk; a crash loses at most the
    chunk in flight)."""
    from trustmargin_integrations.resumable import run_chunks

    run_dir.mkdir(parents=True, exist_ok=True)
    store = ResultStore(run_dir / ANSWERS_FILE)
    run_chunks(store, examples, key=lambda e: _key(e.question),
               compute=lambda chunk: [answerer.answer(e.question).record() for e in chunk],
               batch_size=batch_size, desc="your chain, closed-book and as deployed",
               progress=progress)
    return [BothAnswers.from_record(store.require(_key(e.question), "run_dir", "lacks an "
                                                  "answer", "rerun the same command"))
            for e in examples]


def write_records(examples: Sequence[EvalExample], answers: Sequence[BothAnswers],
                  path: Path) -> Path:
    """The labeled records (id, question, gold answers) with the chain's two answers and the
    passages its deployed run retrieved, as JSONL the check reads."""
    lines = [json.dumps({"id": e.id, "question": e.question, "answers": list(e.answers),
                         **({"type": e.meta["type"]} if "type" in e.meta else {}),
                         **a.record()}, ensure_ascii=False)
             for e, a in zip(examples, answers, strict=True)]
    return write_text_atomic(path, "".join(line + "\n" for line in lines))


def refuse_given(examples: Sequence[EvalExample], labeled: Path) -> None:
    """Refuse records the chain would make moot: ones that already carry the chain's answers
    or their own passages (neither may be silently replaced by the chain's)."""
    for e in examples:
        if e.chain is not None:
            raise InvalidInputError(f"{labeled.name}[{e.id}].direct_answer",
                                    "is given while --chain runs your chain for it",
                                    "check these answers without --chain, or remove "
                                    "direct_answer and rag_answer to have the chain answer")
        if e.passages is not None:
            raise InvalidInputError(f"{labeled.name}[{e.id}].passages",
                                    "are given while --chain retrieves with your chain",
                                    "remove them (the chain's retriever gives the passages), "
                                    "or check without --chain")
