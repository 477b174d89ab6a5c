"""What goes over the wire: the index mapping, the paper's query, bulk actions, and hits.

The query is the paper's retrieval query: a ``multi_match`` of type ``best_fields`` over
``title^2`` and ``text`` with ``tie_breaker=0.5`` (BM25, title boosted). Hits come back as the
same :class:`~trustmargin_integrations.schema.Passage` records the embedded
:class:`~trustmargin_integrations.retrieval.bm25.BM25Index` returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from itertools import pairwise
from typing import Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.retrieval.elasticsearch.connection import (
    ElasticsearchRetrievalError,
)
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.validation import check_k, is_blank_text

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
    if not isinstance(query, str) or is_blank_text(query):
        raise InvalidInputError("query", "is empty or not a string",
                                "pass a non-empty query string")
    check_k(k)
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


def hit_to_passage(hit: Any) -> Passage:
    """A search hit as a Passage (score = the BM25 ``_score``); a hit of another shape
    (not an object, no text, a list for metadata, an odd id, title or score) is an
    :class:`ElasticsearchRetrievalError`, never a traceback or a passage made up of it."""
    if not isinstance(hit, Mapping):
        raise _odd(f"a hit is a {type(hit).__name__}, not an object")
    name = str(hit.get("_id"))[:60]
    source = hit.get("_source")
    if source is None:
        source = {}
    if not isinstance(source, Mapping):
        raise _odd(f"hit {name!r} has a _source that is a {type(source).__name__}")
    text = source.get("text")
    if not isinstance(text, str):
        raise ElasticsearchRetrievalError(f"hit {name!r} has no 'text' field; the "
                                          "index was not built by TrustMargin")
    metadata = source.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise _odd(f"hit {name!r} has metadata that is a {type(metadata).__name__}, not an "
                   "object")
    title = source.get("title")
    if title is not None and not isinstance(title, str):
        raise _odd(f"hit {name!r} has a title that is a {type(title).__name__}")
    ident = source.get("id", hit.get("_id"))
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        raise _odd(f"hit {name!r} has an id that is a {type(ident).__name__}")
    score = hit.get("_score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                              or not math.isfinite(score)):
        raise ElasticsearchRetrievalError(
            f"hit {name!r} has _score {str(score)[:40]!r}, not a finite number. Fix: "
            "check the index's similarity settings (a script score may divide by zero)")
    return Passage(id=str(ident), text=text, title=title or "",
                   score=None if score is None else float(score),
                   metadata={k: v for k, v in metadata.items()
                             if isinstance(v, (str, int, float, bool)) or v is None})


def hits_to_passages(answer: Any, k: int, where: str) -> list[Passage]:
    """The passages of one search answer (``{"hits": {"hits": [...]}}``) asked for ``k``
    hits, best first: more than ``k`` hits, or hits out of score order, is not the answer to
    the query sent (a proxy or server that ignores ``size`` or sorts otherwise)."""
    body = getattr(answer, "body", answer)  # the client's ObjectApiResponse, or a mapping
    hits = body.get("hits") if isinstance(body, Mapping) else None
    items = hits.get("hits") if isinstance(hits, Mapping) else None
    if not isinstance(items, list):
        shown = type(body).__name__ if not isinstance(body, Mapping) else str(body)[:80]
        raise _odd(f"{where} answered without a hits list ({shown})")
    if len(items) > k:
        raise _odd(f"{where} answered {len(items):,} hits for k={k}: the server ignored the "
                   "size asked for")
    passages = [hit_to_passage(h) for h in items]
    scores = [p.score for p in passages if p.score is not None]
    if len(scores) == len(passages) and any(a < b for a, b in pairwise(scores)):
        raise _odd(f"{where} answered hits out of score order ({scores[:5]})")
    return passages


def msearch_answers(answer: Any, count: int) -> list[Mapping[str, Any]]:
    """The ``count`` answers of one ``_msearch`` request, each an object (errors included)."""
    body = getattr(answer, "body", answer)
    items = body.get("responses") if isinstance(body, Mapping) else None
    if not isinstance(items, list):
        raise _odd("the multi-search answered without a responses list")
    if len(items) != count:
        raise _odd(f"the multi-search answered {len(items)} responses to {count} queries")
    odd = next((i for i, item in enumerate(items) if not isinstance(item, Mapping)), None)
    if odd is not None:
        raise _odd(f"response {odd} of the multi-search is a {type(items[odd]).__name__}")
    return items


def _odd(problem: str) -> ElasticsearchRetrievalError:
    """The error for an answer that is not the one Elasticsearch gives to our request."""
    return ElasticsearchRetrievalError(
        f"{problem}: not an Elasticsearch answer to this search. Fix: point the URL at "
        "Elasticsearch itself (not a proxy that rewrites answers) and use an index built by "
        "TrustMargin (index_corpus or `trustmargin index --elasticsearch URL`)")
