"""The plug-in core stands apart from the evaluation layer: importing an adapter (or the
arbiter) loads no module of ``evaluation``, of the multi-step ``pipelines``, of schema-guided
decoding or of the command line, and none of the extras' packages a wrapped chain does not use
(the import-linter contracts in pyproject.toml say the same of the source; each import is
measured in a fresh interpreter)."""

from __future__ import annotations

import pytest
from import_support import fresh_modules

PACKAGE = "trustmargin_integrations"
LAYERS_KEPT_OUT = (f"{PACKAGE}.evaluation", f"{PACKAGE}.pipelines", f"{PACKAGE}.guided",
                   f"{PACKAGE}.cli")
# The extras' packages a chain wrapper does not need: the CLI (typer), BM25 (bm25s,
# PyStemmer), structured-output checking (jsonschema), the local engine (torch, transformers).
ENGINES_KEPT_OUT = ("typer", "bm25s", "Stemmer", "jsonschema", "torch", "transformers")


def _outside_core(loaded: set[str]) -> list[str]:
    """The loaded modules of the layers and the extras' packages kept out of the core."""
    return sorted(name for name in loaded
                  if any(name == top or name.startswith(top + ".")
                         for top in (*LAYERS_KEPT_OUT, *ENGINES_KEPT_OUT)))


@pytest.mark.parametrize("module", ["langchain", "llama_index", "arbiter", "score_file"])
def test_importing_the_core_loads_no_evaluation_module(module: str) -> None:
    pytest.importorskip({"langchain": "langchain_core",
                         "llama_index": "llama_index.core"}.get(module, "pydantic"))
    loaded = fresh_modules(f"import {PACKAGE}.{module}")
    assert f"{PACKAGE}.{module}" in loaded
    assert _outside_core(loaded) == []


def test_the_chat_models_load_guided_decoding_only_when_asked() -> None:
    # The adapters' local models stream without the guided decoder; it loads with the first
    # structured-output request (with_structured_output needs no model to build the runnable).
    pytest.importorskip("langchain_core")
    loaded = fresh_modules(
        f"from {PACKAGE}.langchain.llms import LocalChatModel\n"
        "from pydantic import BaseModel\n"
        "class Person(BaseModel):\n"
        "    name: str\n"
        "LocalChatModel.with_structured_output("
        "LocalChatModel.model_construct(backend=None), Person)")
    assert f"{PACKAGE}.guided" in loaded


def test_the_check_sees_every_layer_and_engine_when_it_loads() -> None:
    # The filter above is not vacuous: each layer and engine kept out is caught when it loads.
    pytest.importorskip("typer")
    loaded = fresh_modules(f"import {PACKAGE}.evaluation.rundir\n"
                           f"import {PACKAGE}.pipelines\n"
                           f"import {PACKAGE}.guided\n"
                           f"import {PACKAGE}.cli\n"
                           f"from {PACKAGE}.retrieval import BM25Index\n"
                           "import jsonschema")
    caught = _outside_core(loaded)
    for name in (f"{PACKAGE}.evaluation.rundir", f"{PACKAGE}.pipelines", f"{PACKAGE}.guided",
                 f"{PACKAGE}.cli", "typer", "bm25s", "Stemmer", "jsonschema"):
        assert name in caught, name
    # ... and the adapter's own `langchain.pipelines` module is not the pipelines package.
    assert _outside_core({f"{PACKAGE}.langchain.pipelines"}) == []
    assert _outside_core({f"{PACKAGE}.guidedness", "typeraser", "torchvision"}) == []
