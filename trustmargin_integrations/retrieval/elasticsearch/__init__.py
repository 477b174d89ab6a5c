"""Elasticsearch retrieval: index a corpus with an explicit BM25 mapping and search top-k.

The query is the paper's (``multi_match`` ``best_fields`` over ``title^2`` and ``text``,
``tie_breaker=0.5``); hits come back as the same
:class:`~trustmargin_integrations.schema.Passage` records as the embedded BM25 index's.
Connection settings come from arguments or the ``TRUSTMARGIN_ES_*`` variables (table in
docs/scale_out.md, "Settings" and "Bounded waits"); credentials go to the client only.
"""

from trustmargin_integrations.retrieval.elasticsearch.command import index_command
from trustmargin_integrations.retrieval.elasticsearch.connection import (
    DEFAULT_INDEX,
    ENV_API_KEY,
    ENV_CA_CERT,
    ENV_INDEX,
    ENV_PASSWORD,
    ENV_PREFIX,
    ENV_URL,
    ENV_USER,
    ElasticsearchRetrievalError,
    ElasticsearchSettings,
    ElasticsearchVariables,
    connect,
)
from trustmargin_integrations.retrieval.elasticsearch.corpus_files import (
    DPR_HEADER,
    iter_dpr_tsv,
    read_corpus,
)
from trustmargin_integrations.retrieval.elasticsearch.indexing import IndexReport
from trustmargin_integrations.retrieval.elasticsearch.queries import (
    TITLE_BOOST,
    bulk_actions,
    hit_to_passage,
    index_body,
    search_body,
)
from trustmargin_integrations.retrieval.elasticsearch.retriever import ElasticsearchRetriever

__all__ = [
    "DEFAULT_INDEX",
    "DPR_HEADER",
    "ENV_API_KEY",
    "ENV_CA_CERT",
    "ENV_INDEX",
    "ENV_PASSWORD",
    "ENV_PREFIX",
    "ENV_URL",
    "ENV_USER",
    "TITLE_BOOST",
    "ElasticsearchRetrievalError",
    "ElasticsearchRetriever",
    "ElasticsearchSettings",
    "ElasticsearchVariables",
    "IndexReport",
    "bulk_actions",
    "connect",
    "hit_to_passage",
    "index_body",
    "index_command",
    "iter_dpr_tsv",
    "read_corpus",
    "search_body",
]
