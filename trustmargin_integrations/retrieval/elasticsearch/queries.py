"""What goes over the wire: the index mapping, the paper's query, bulk actions, and hits.

The query is the paper's retrieval query: a ``multi_match`` of type ``best_fields`` over
``title^2`` and ``text`` with ``tie_breaker=0.5`` (BM25, title boosted). Hits come back as the
same :class:`~trustmargin_integrations.schema.Passage` records the embedded
:class:`~trustmargin_integrations.retrieval.bm25.BM25Index` returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.retrieval.elasticsearch.connection import (
    ElasticsearchRetrievalError,
)
from trustmargin_integrations.schema import Passage

TITLE_BOOST = 2.0
"""The title weight of the paper's retrieval query (``title^2``)."""


def index_body(analyzer: str = "english", *, shards: int = 1, replicas: int = 0
               ) -> dict[str, Any]:
    """Settings and the explicit mapping of a passage index (BM25 on title and text).

    ``english`` (stemming, stopwords) matches the embedded BM25 index's tokenization; the
    paper's index used the ``standard`` analyzer.
    """
    return {
        "settings": {
            "number_of_shards": shards,
            "number_of_replicas": replicas,
            "index": {"similarity": {"default": {"type": "BM25", "k1": 1.2, "b": 0.75}}},
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "id": {"type": "keyword"},
                "title": {"type": "text", "analyzer": analyzer},
                "text": {"type": "text", "analyzer": analyzer},
                # Kept with the passage, never searched.
                "metadata": {"type": "object", "enabled": False},
            },
        },
    }


def search_body(query: str, k: int, title_boost: float = TITLE_BOOST) -> dict[str, Any]:
    """The paper's top-k BM25 query: ``multi_match`` best_fields over title^boost and text."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query", "is empty or not a string",
                                "pass a non-empty query string")
    if not isinstance(k, int) or k < 1:
        raise InvalidInputError("k", f"must be an integer >= 1, got {k!r}",
                                "ask for at least one passage")
    return {
        "size": k,
        "query": {
            "multi_match": {
                "query": query,
                "fields": [f"title^{title_boost:g}", "text"],
                "type": "best_fields",
                "tie_breaker": 0.5,
            }
        },
        "_source": ["id", "title", "text", "metadata"],
    }


def bulk_actions(passages: Iterable[Passage], index: str) -> Iterator[dict[str, Any]]:
    """One bulk ``index`` action per passage; the passage id is the document ``_id``."""
    for p in passages:
        source: dict[str, Any] = {"id": p.id, "title": p.title, "text": p.text}
        if p.metadata:
            source["metadata"] = dict(p.metadata)
        yield {"_op_type": "index", "_index": index, "_id": p.id, "_source": source}


def hit_to_passage(hit: Mapping[str, Any]) -> Passage:
    """A search hit as a Passage (score = the BM25 ``_score``)."""
    source = hit.get("_source") or {}
    text = source.get("text")
    if not isinstance(text, str):
        raise ElasticsearchRetrievalError(f"hit {hit.get('_id')!r} has no 'text' field; the "
                                          "index was not built by TrustMargin")
    metadata = source.get("metadata") or {}
    score = hit.get("_score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                              or not math.isfinite(score)):
        raise ElasticsearchRetrievalError(
            f"hit {hit.get('_id')!r} has _score {str(score)[:40]!r}, not a finite number. Fix: "
            "check the index's similarity settings (a script score may divide by zero)")
    return Passage(id=str(source.get("id", hit.get("_id"))), text=text,
                   title=str(source.get("title") or ""),
                   score=None if score is None else float(score),
                   metadata={k: v for k, v in metadata.items()
                             if isinstance(v, (str, int, float, bool)) or v is None})
