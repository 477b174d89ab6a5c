"""LangChain's own standard retriever suite (``langchain-tests``) on TrustMarginRetriever.

The retriever wraps a real embedded :class:`BM25Index` over a small corpus written here; five
passages match the example query, so ``k`` (constructor or per call) decides how many come back.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from trustmargin_integrations.langchain import TrustMarginRetriever
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Passage

CORPUS = [
    Passage(id="velmora", title="Velmora Bridge",
            text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
    Passage(id="golden-gate", title="Golden Gate Bridge",
            text="The Golden Gate Bridge is a suspension bridge in San Francisco."),
    Passage(id="tower", title="Tower Bridge",
            text="Tower Bridge crosses the Thames in London."),
    Passage(id="rialto", title="Rialto Bridge",
            text="The Rialto Bridge is the oldest bridge across the Grand Canal in Venice."),
    Passage(id="brooklyn", title="Brooklyn Bridge",
            text="The Brooklyn Bridge joins Manhattan and Brooklyn over the East River."),
    Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
    Passage(id="orchard", title="Orchards", text="Apple orchards need cold winters to fruit."),
]
INDEX = BM25Index.build(CORPUS)

# The project runs pytest-asyncio in strict mode, so the suite's async test needs the asyncio
# marker. The suite forbids overriding its tests, so the marker goes on the whole module, and
# pytest-asyncio's note that the sync tests carry it too is expected here.
pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.filterwarnings("ignore:The test <Function .*> is marked with '@pytest.mark.asyncio'"
                               ":pytest.PytestWarning"),
]


class TestTrustMarginRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return TrustMarginRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"retriever": INDEX, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "Which bridge was designed by an engineer?"
