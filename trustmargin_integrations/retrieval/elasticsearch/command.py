"""``trustmargin index --elasticsearch URL --corpus FILE``: connect, create, bulk-load."""

from __future__ import annotations

from pathlib import Path

from trustmargin_integrations.retrieval.elasticsearch.indexing import IndexReport
from trustmargin_integrations.retrieval.elasticsearch.retriever import ElasticsearchRetriever


def index_command(
    corpus: str | Path,
    url: str | None = None,
    *,
    index: str | None = None,
    recreate: bool = False,
    chunk_size: int = 500,
    api_key: str | None = None,
    username: str | None = None,
    password: str | None = None,
    ca_certs: str | None = None,
    progress: bool = True,
) -> IndexReport:
    """What ``trustmargin index --elasticsearch URL --corpus FILE`` runs."""
    es = ElasticsearchRetriever.connect(url, index=index, api_key=api_key, username=username,
                                        password=password, ca_certs=ca_certs)
    return es.index_corpus(corpus, recreate=recreate, chunk_size=chunk_size, progress=progress)
