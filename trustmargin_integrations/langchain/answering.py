"""The model a LangChain chain answers with, by name, for the scorer-is-not-the-answerer
warning (:mod:`trustmargin_integrations.answering`)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.runnables import Runnable

from trustmargin_integrations.langchain.rewire import find

# Where chat model classes keep the model's name (ChatOpenAI: model_name; ChatAnthropic,
# ChatOllama: model; ours: model_id), in their identifying parameters or as attributes.
_NAME_KEYS = ("model_name", "model", "model_id")


def answering_model(chain: Runnable[Any, Any]) -> str | None:
    """The name of the first language model ``chain`` runs (None: it has none, or it does not
    report a name; a model inside a ``RunnableLambda``'s function cannot be reached)."""
    llm = find(chain, lambda part: isinstance(part, BaseLanguageModel))
    if llm is None:
        return None
    params = getattr(llm, "_identifying_params", {}) or {}
    for key in _NAME_KEYS:
        value = params.get(key, getattr(llm, key, None))
        if isinstance(value, str) and value.strip():
            return value
    return None
