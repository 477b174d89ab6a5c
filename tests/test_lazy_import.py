"""The package root re-exports lazily: importing a light module stays light, and every
public name still resolves from the root."""

from __future__ import annotations

import sys

import pytest
from import_support import fresh_modules

import trustmargin_integrations as package

HEAVY = ["bm25s", "Stemmer", "numpy", "torch", "transformers",
         "trustmargin_integrations.arbiter", "trustmargin_integrations.retrieval"]


def test_importing_errors_loads_no_heavy_module() -> None:
    loaded = fresh_modules("import trustmargin_integrations.errors")
    assert "trustmargin_integrations.errors" in loaded
    assert not [name for name in HEAVY if name in loaded]


def test_importing_the_root_loads_no_heavy_module_until_a_name_is_used() -> None:
    loaded = fresh_modules("import trustmargin_integrations")
    assert not [name for name in HEAVY if name in loaded]
    used = fresh_modules("from trustmargin_integrations import TrustMargin")
    assert "trustmargin_integrations.arbiter" in used


def test_every_public_name_resolves_from_its_module() -> None:
    table = package._MODULE_OF
    assert sorted(package.__all__) == sorted(table)
    for name in package.__all__:
        value = getattr(package, name)
        module = sys.modules[f"trustmargin_integrations.{table[name]}"]
        assert value is getattr(module, name)
        assert name in dir(package)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        package.NoSuchName  # noqa: B018


def test_the_records_and_the_retrievers_load_neither_the_rule_nor_the_settings() -> None:
    # Every retriever returns Passage records: neither they nor the records depend on the
    # decision policies (the rule reads the records, never the other way round).
    for code in ("import trustmargin_integrations.schema",
                 "from trustmargin_integrations.retrieval import BM25Index"):
        loaded = fresh_modules(code)
        assert "trustmargin_integrations.schema" in loaded
        assert not {"trustmargin_integrations.rule", "trustmargin_integrations.config"} & loaded
