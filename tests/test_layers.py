"""The plug-in core stands apart from the evaluation layer: importing an adapter (or the
arbiter) loads no module of ``evaluation`` or of the multi-step ``pipelines``, and no BM25
engine (the import-linter contract in pyproject.toml says the same of the source)."""

from __future__ import annotations

import pytest
from import_support import fresh_modules

PACKAGE = "trustmargin_integrations"
LAYERS_KEPT_OUT = (f"{PACKAGE}.evaluation", f"{PACKAGE}.pipelines")
ENGINES_KEPT_OUT = ("bm25s", "Stemmer")


def _outside_core(loaded: set[str]) -> list[str]:
    """The loaded modules of the evaluation layer or the pipelines, and BM25's engines."""
    return sorted(name for name in loaded
                  if name in ENGINES_KEPT_OUT
                  or any(name == top or name.startswith(top + ".") for top in LAYERS_KEPT_OUT))


@pytest.mark.parametrize("module", ["langchain", "llama_index", "arbiter", "score_file"])
def test_importing_the_core_loads_no_evaluation_module(module: str) -> None:
    pytest.importorskip({"langchain": "langchain_core",
                         "llama_index": "llama_index.core"}.get(module, "pydantic"))
    loaded = fresh_modules(f"import {PACKAGE}.{module}")
    assert f"{PACKAGE}.{module}" in loaded
    assert _outside_core(loaded) == []


def test_the_check_sees_the_evaluation_layer_when_it_loads() -> None:
    # The filter above is not vacuous: the evaluation layer and BM25 are caught by it.
    loaded = fresh_modules(f"import {PACKAGE}.evaluation.rundir\n"
                            f"from {PACKAGE}.retrieval import BM25Index")
    caught = _outside_core(loaded)
    assert f"{PACKAGE}.evaluation.rundir" in caught
    assert "bm25s" in caught
    # ... and the adapter's own `langchain.pipelines` module is not the pipelines package.
    assert _outside_core({f"{PACKAGE}.langchain.pipelines"}) == []
