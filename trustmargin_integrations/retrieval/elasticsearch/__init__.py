"""Elasticsearch retrieval: index a corpus with an explicit BM25 mapping and search top-k.

The query is the paper's retrieval query: a ``multi_match`` of type ``best_fields`` over
``title^2`` and ``text`` with ``tie_breaker=0.5`` (BM25, title boosted). Hits come back as the
same :class:`~trustmargin_integrations.schema.Passage` records the embedded
:class:`~trustmargin_integrations.retrieval.bm25.BM25Index` returns.

Connection settings come from arguments or the environment:

========================== ===========================================================
``TRUSTMARGIN_ES_URL``      server URL, e.g. ``https://localhost:9200``
``TRUSTMARGIN_ES_API_KEY``  API key (base64 ``id:key`` form), or
``TRUSTMARGIN_ES_USER``     basic-auth user name, with
``TRUSTMARGIN_ES_PASSWORD`` its password
``TRUSTMARGIN_ES_CA_CERT``  CA certificate file for a self-signed HTTPS server
``TRUSTMARGIN_ES_INDEX``    index name (default ``trustmargin``)
``TRUSTMARGIN_ES_TIMEOUT``  bound on one request, every attempt included (default 120 s)
``TRUSTMARGIN_ES_READ_TIMEOUT`` one attempt's limit (default 60 s; lowered so that every
                            attempt fits the total)
``TRUSTMARGIN_ES_RETRIES``  retries after a timeout or a dropped connection (default 2)
========================== ===========================================================

The Elasticsearch client has one limit per attempt for connecting and reading together, so
``TRUSTMARGIN_ES_CONNECT_TIMEOUT`` has no separate effect here (see
:mod:`trustmargin_integrations.waits`).

Credentials are handed to the client and nowhere else: they are not in ``repr``, log lines,
error messages or returned passages (every message from the client is scrubbed of them).

Modules: :mod:`.connection` (settings, credentials, the client and its failures),
:mod:`.queries` (mapping, query, bulk actions, hits), :mod:`.corpus_files` (DPR ``.tsv`` and
JSON/JSONL readers), :mod:`.indexing` (create and bulk-load), :mod:`.retriever`
(``ElasticsearchRetriever``), :mod:`.command` (``index_command``).
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
