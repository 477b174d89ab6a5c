"""The retriever: top-k BM25 search over an Elasticsearch index (the Retriever protocol).

Its indexing methods come from :class:`~.indexing.IndexingMixin`; how to reach the server,
from :mod:`.connection`; the request bodies, from :mod:`.queries`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trustmargin_integrations.environment import variables_named
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.retrieval.elasticsearch.connection import (
    DEFAULT_INDEX,
    ENV_INDEX,
    ElasticsearchRetrievalError,
    ElasticsearchSettings,
    ElasticsearchVariables,
    connect,
    request_failed,
    scrubbed_detail,
)
from trustmargin_integrations.retrieval.elasticsearch.indexing import IndexingMixin
from trustmargin_integrations.retrieval.elasticsearch.queries import (
    TITLE_BOOST,
    hits_to_passages,
    msearch_answers,
    search_body,
)
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.validation import check_queries


class ElasticsearchRetriever(IndexingMixin):
    """Top-k BM25 retrieval from an Elasticsearch index (implements the Retriever protocol).

    Args:
        client: an ``elasticsearch.Elasticsearch`` client (see :meth:`connect`).
        index: the index name.
        title_boost: title weight in the ``multi_match`` query.
        settings: the settings the client was built from (used to scrub secrets from errors).

    Example:
        >>> es = ElasticsearchRetriever.connect("http://localhost:9200")  # doctest: +SKIP
        >>> es.index_corpus("corpus.jsonl", recreate=True)  # doctest: +SKIP
        >>> [p.title for p in es.search("capital of France", k=3)]  # doctest: +SKIP
    """

    def __init__(
        self,
        client: Any,
        index: str = DEFAULT_INDEX,
        *,
        title_boost: float = TITLE_BOOST,
        settings: ElasticsearchSettings | None = None,
    ) -> None:
        if not isinstance(index, str) or not index or index != index.lower() or " " in index:
            raise InvalidInputError("index", f"{index!r} is not a valid index name",
                                    "use a lowercase name without spaces, e.g. 'trustmargin'")
        if title_boost <= 0:
            raise InvalidInputError("title_boost", f"must be > 0, got {title_boost}",
                                    "use 1 for no boost")
        self.client = client
        self.index = index
        self.title_boost = title_boost
        self.settings = settings

    @classmethod
    def connect(
        cls,
        url: str | None = None,
        *,
        index: str | None = None,
        api_key: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ca_certs: str | None = None,
        verify_certs: bool = True,
        request_timeout: float | None = None,
        title_boost: float = TITLE_BOOST,
        max_retries: int | None = None,
        timeout_s: float | None = None,
    ) -> ElasticsearchRetriever:
        """Connect with arguments, falling back to ``TRUSTMARGIN_ES_*`` variables (waits:
        see :class:`ElasticsearchSettings`)."""
        settings = ElasticsearchSettings.from_env(
            url=url, api_key=api_key, username=username, password=password, ca_certs=ca_certs,
            verify_certs=verify_certs, request_timeout=request_timeout,
            max_retries=max_retries, timeout_s=timeout_s,
        )
        from_env = ElasticsearchVariables.read().index
        name = index or from_env or DEFAULT_INDEX
        with variables_named({"index": ENV_INDEX} if not index and from_env else {}):
            return cls(connect(settings), name, title_boost=title_boost, settings=settings)

    def __repr__(self) -> str:
        where = self.settings.safe_url if self.settings else "client"
        return f"ElasticsearchRetriever(url={where!r}, index={self.index!r})"

    def count(self) -> int:
        """Documents in the index."""
        try:
            return int(self.client.count(index=self.index)["count"])
        except Exception as exc:
            raise request_failed(f"counting {self.index!r}", exc, self.settings,
                                 self.index) from None

    # -- search -----------------------------------------------------------------------------

    def search(self, query: str, k: int) -> list[Passage]:
        """Top-``k`` passages for ``query``, best first, each with its BM25 score."""
        body = search_body(query, k, self.title_boost)
        try:
            response = self.client.search(index=self.index, **body)
        except Exception as exc:
            raise request_failed("search", exc, self.settings, self.index) from None
        return hits_to_passages(response, k, "the search")

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages for each query, in one ``_msearch`` request."""
        queries = check_queries(queries)
        if not queries:
            return []
        searches: list[dict[str, Any]] = []
        for i, q in enumerate(queries):
            try:
                body = search_body(q, k, self.title_boost)
            except InvalidInputError as exc:
                raise InvalidInputError(f"queries[{i}]", exc.problem, exc.fix) from None
            searches += [{"index": self.index}, body]
        try:
            response = self.client.msearch(searches=searches)
        except Exception as exc:
            raise request_failed("multi-search", exc, self.settings, self.index) from None
        out = []
        for i, item in enumerate(msearch_answers(response, len(queries))):
            if "error" in item:
                reason = scrubbed_detail(str(item["error"]), self.settings)
                raise ElasticsearchRetrievalError(f"query {i} failed on the server: {reason}")
            out.append(hits_to_passages(item, k, f"query {i} of the multi-search"))
        return out
