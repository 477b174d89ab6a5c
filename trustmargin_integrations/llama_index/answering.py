"""The LLM a LlamaIndex query engine answers with: for the closed-book side of
``trustmargin check --chain`` (the engine's own LLM, asked without retrieval) and for the
scorer-is-not-the-answerer warning (:mod:`trustmargin_integrations.answering`)."""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import LLM


def engine_llm(query_engine: Any) -> LLM | None:
    """The LLM a query engine's response synthesizer writes with (``RetrieverQueryEngine``
    and ``index.as_query_engine()``); None when the engine keeps none where LlamaIndex's
    synthesizers keep it."""
    synthesizer = getattr(query_engine, "_response_synthesizer", None)
    llm = getattr(synthesizer, "_llm", None) or getattr(query_engine, "_llm", None)
    return llm if isinstance(llm, LLM) else None


def llm_name(llm: LLM | None) -> str | None:
    """The model name an LLM reports in its metadata (None: none, or no LLM)."""
    if llm is None:
        return None
    name = getattr(llm.metadata, "model_name", None)
    return name if isinstance(name, str) and name.strip() and name != "unknown" else None
