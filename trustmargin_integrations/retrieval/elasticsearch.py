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
"""

from __future__ import annotations

import csv
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trustmargin_integrations.errors import BackendError, InvalidInputError
from trustmargin_integrations.retrieval.corpus import load_corpus
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.urls import (
    protect_basic_auth,
    protect_logs,
    redact_url,
    scrub,
    split_credentials,
)
from trustmargin_integrations.waits import Waits

logger = logging.getLogger(__name__)

ENV_URL = "TRUSTMARGIN_ES_URL"
ENV_API_KEY = "TRUSTMARGIN_ES_API_KEY"
ENV_USER = "TRUSTMARGIN_ES_USER"
ENV_PASSWORD = "TRUSTMARGIN_ES_PASSWORD"
ENV_CA_CERT = "TRUSTMARGIN_ES_CA_CERT"
ENV_INDEX = "TRUSTMARGIN_ES_INDEX"
DEFAULT_INDEX = "trustmargin"
ENV_PREFIX = "TRUSTMARGIN_ES"
"""Prefix of the wait settings (``TRUSTMARGIN_ES_TIMEOUT``, ``..._READ_TIMEOUT``,
``..._RETRIES``)."""

TITLE_BOOST = 2.0
"""The title weight of the paper's retrieval query (``title^2``)."""

DPR_HEADER = ("id", "text", "title")


class ElasticsearchRetrievalError(BackendError):
    """The Elasticsearch server refused, failed or could not be reached."""


# -- settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElasticsearchSettings:
    """How to reach the server. Secrets are excluded from ``repr``.

    A ``user:password@`` part in ``url`` is moved into basic auth and removed from the URL.
    ``request_timeout`` (one attempt), ``max_retries`` and ``timeout_s`` (one request, all
    attempts) default to ``TRUSTMARGIN_ES_READ_TIMEOUT``, ``_RETRIES``, ``_TIMEOUT``, else
    60 s, 2 and 120 s; after construction they hold the values in force.
    """

    url: str
    api_key: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    verify_certs: bool = True
    request_timeout: float | None = None
    max_retries: int | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise InvalidInputError("url", "is empty",
                                    f"pass the Elasticsearch URL or set {ENV_URL}")
        # Credentials first: a password may hold a "/" that would otherwise end the host.
        clean, credentials = split_credentials(self.url.strip())
        parts = urlsplit(clean)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInputError("url", f"{self.safe_url!r} is not an http(s) URL",
                                    "pass a URL such as http://localhost:9200")
        try:
            parts.port  # noqa: B018  (urlsplit checks the port only when asked)
        except ValueError:
            raise InvalidInputError("url", f"{self.safe_url!r} has a port that is not a "
                                    "number", "pass a URL such as http://localhost:9200"
                                    ) from None
        if credentials is not None:
            if self.username or self.api_key:
                raise InvalidInputError("url", "holds credentials and other credentials were "
                                        "given too", "give credentials one way only")
            object.__setattr__(self, "username", credentials[0])
            object.__setattr__(self, "password", credentials[1])
            object.__setattr__(self, "url", redact_url(clean))
        protect_logs(self.secrets)
        protect_basic_auth(self.username or "", self.password or "")
        waits = Waits.resolve(ENV_PREFIX, {"read_timeout_s": self.request_timeout,
                                           "max_retries": self.max_retries,
                                           "timeout_s": self.timeout_s})
        object.__setattr__(self, "request_timeout", waits.read_timeout_s)
        object.__setattr__(self, "max_retries", waits.max_retries)
        object.__setattr__(self, "timeout_s", waits.timeout_s)
        if self.api_key and self.username:
            raise InvalidInputError("api_key", "and basic auth were both given",
                                    "use either an API key or a user name and password")
        if self.username and not self.password:
            raise InvalidInputError("password", "is missing for basic auth",
                                    f"pass password= or set {ENV_PASSWORD}")
        if self.ca_certs and not Path(self.ca_certs).is_file():
            raise InvalidInputError("ca_certs", f"{self.ca_certs} does not exist",
                                    "pass the path of the server's CA certificate (PEM)")

    @property
    def safe_url(self) -> str:
        """The URL with any credentials and query string removed (safe to print)."""
        return redact_url(self.url)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret string, for scrubbing messages."""
        return tuple(s for s in (self.api_key, self.password) if s)

    @classmethod
    def from_env(cls, **overrides: Any) -> ElasticsearchSettings:
        """Settings from ``TRUSTMARGIN_ES_*`` variables; non-``None`` arguments win."""
        env = {
            "url": os.environ.get(ENV_URL),
            "api_key": os.environ.get(ENV_API_KEY),
            "username": os.environ.get(ENV_USER),
            "password": os.environ.get(ENV_PASSWORD),
            "ca_certs": os.environ.get(ENV_CA_CERT),
        }
        given = {k: v for k, v in overrides.items() if v is not None}
        if any(k in given for k in ("api_key", "username", "password")):
            # Credentials passed as arguments replace the environment's, never mix with them.
            for key in ("api_key", "username", "password"):
                env.pop(key)
        # Not a truthiness test: verify_certs=False and max_retries=0 are settings too.
        merged = {k: v for k, v in {**env, **given}.items() if v is not None and v != ""}
        if "url" not in merged:
            raise InvalidInputError("url", "is not set",
                                    f"pass the Elasticsearch URL or set {ENV_URL}")
        return cls(**merged)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``elasticsearch.Elasticsearch``."""
        assert self.request_timeout is not None and self.timeout_s is not None
        attempts = (self.max_retries or 0) + 1
        kwargs: dict[str, Any] = {
            "hosts": [self.url],
            # The client retries at once, without pauses, so attempts x per-attempt limit
            # is the whole wait: lowering the limit keeps a dead server within timeout_s.
            "request_timeout": min(self.request_timeout, self.timeout_s / attempts),
            "max_retries": self.max_retries,
            "retry_on_timeout": True,
        }
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if self.username:
            kwargs["basic_auth"] = (self.username, self.password or "")
        if self.ca_certs:
            kwargs["ca_certs"] = self.ca_certs
        if not self.verify_certs:
            kwargs["verify_certs"] = False
        return kwargs

    def scrub(self, text: str) -> str:
        """``text`` with URL credentials and every secret replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return scrub(text)


def connect(settings: ElasticsearchSettings) -> Any:
    """An ``elasticsearch.Elasticsearch`` client for ``settings`` (no request is made)."""
    try:
        from elasticsearch import Elasticsearch
    except ImportError as exc:
        raise ElasticsearchRetrievalError("the elasticsearch client is not installed. Fix: pip "
                                          "install 'trustmargin-integrations[elasticsearch]'"
                                          ) from exc
    return Elasticsearch(**settings.client_kwargs())


# -- request bodies --------------------------------------------------------------------------


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


# -- corpus readers --------------------------------------------------------------------------


def iter_dpr_tsv(path: str | Path) -> Iterator[Passage]:
    """Stream the DPR ``psgs_w100.tsv`` layout: a header ``id, text, title``, then one row each.

    Rows are read lazily, so the 21M-passage Wikipedia dump never sits in memory.
    """
    file = Path(path)
    if not file.is_file():
        raise InvalidInputError("corpus", f"file {file} does not exist",
                                "pass the path of psgs_w100.tsv or a JSON/JSONL corpus")
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with file.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if header is None or tuple(h.strip().lower() for h in header[:3]) != DPR_HEADER:
            raise InvalidInputError(str(file), f"has header {header!r}, not id/text/title",
                                    "use the DPR layout: a tab-separated header "
                                    "'id<TAB>text<TAB>title'")
        for row in reader:
            if not row:
                continue
            if len(row) < 3 or not row[1].strip():
                raise InvalidInputError(f"{file}:{reader.line_num}",
                                        "is not an id/text/title row with a non-empty text",
                                        "fix or remove that line")
            yield Passage(id=row[0], text=row[1], title=row[2])


def read_corpus(path: str | Path) -> Iterator[Passage]:
    """Passages of a DPR ``.tsv`` file (streamed) or a JSON/JSONL ``{title, text}`` corpus."""
    file = Path(path)
    if file.suffix.lower() == ".tsv":
        return iter_dpr_tsv(file)
    return iter(load_corpus(file))


def _count_lines(path: Path) -> int | None:
    if path.suffix.lower() != ".tsv":
        return None
    with path.open("rb") as fh:
        return max(0, sum(1 for _ in fh) - 1)


# -- the retriever ---------------------------------------------------------------------------


@dataclass
class IndexReport:
    """What :meth:`ElasticsearchRetriever.index_passages` did."""

    indexed: int
    failed: int
    seconds: float
    index: str
    errors: list[str] = field(default_factory=list)


class ElasticsearchRetriever:
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
        name = index or os.environ.get(ENV_INDEX) or DEFAULT_INDEX
        return cls(connect(settings), name, title_boost=title_boost, settings=settings)

    def __repr__(self) -> str:
        where = self.settings.safe_url if self.settings else "client"
        return f"ElasticsearchRetriever(url={where!r}, index={self.index!r})"

    # -- errors -----------------------------------------------------------------------------

    def _fail(self, action: str, exc: BaseException) -> ElasticsearchRetrievalError:
        status = getattr(exc, "status_code", None) or getattr(getattr(exc, "meta", None),
                                                              "status", None)
        # Scrub before cutting, so no part of a secret survives at the cut.
        detail = str(getattr(exc, "message", "") or exc)[:4000]
        detail = (self.settings.scrub(detail) if self.settings else scrub(detail))[:300]
        where = self.settings.safe_url if self.settings else "Elasticsearch"
        hint = {401: "check the API key or user name and password",
                403: "give the credentials the index privileges they need",
                404: f"create the index first (index_corpus or `trustmargin index "
                     f"--elasticsearch URL`); index {self.index!r} does not exist"}.get(
            status or 0, "check that the server is up and reachable")
        code = f"HTTP {status}, " if status else ""
        return ElasticsearchRetrievalError(
            f"{action} on {where} failed ({code}{type(exc).__name__}: {detail}). Fix: {hint}")

    # -- indexing ---------------------------------------------------------------------------

    def create_index(self, *, recreate: bool = False, analyzer: str = "english") -> bool:
        """Create the index with :func:`index_body`; True when it was created now."""
        try:
            exists = bool(self.client.indices.exists(index=self.index))
            if exists and not recreate:
                return False
            if exists:
                self.client.indices.delete(index=self.index)
            self.client.indices.create(index=self.index, **index_body(analyzer))
        except Exception as exc:
            raise self._fail(f"creating index {self.index!r}", exc) from None
        return True

    def index_passages(
        self,
        passages: Iterable[Passage],
        *,
        chunk_size: int = 500,
        max_retries: int = 5,
        progress: bool = False,
        total: int | None = None,
        refresh: bool = True,
    ) -> IndexReport:
        """Bulk-index passages; 429 rejections are retried with backoff by the bulk helper.

        Documents that still fail are counted (the first errors are kept, scrubbed).
        """
        from elasticsearch import helpers
        from tqdm.auto import tqdm

        if chunk_size < 1:
            raise InvalidInputError("chunk_size", f"must be >= 1, got {chunk_size}",
                                    "send at least one document per bulk request")
        start = time.perf_counter()
        indexed = failed = 0
        errors: list[str] = []
        bar = tqdm(total=total, desc=f"indexing {self.index}", unit="passage",
                   disable=not progress)
        try:
            for ok, item in helpers.streaming_bulk(
                self.client, bulk_actions(passages, self.index), chunk_size=chunk_size,
                max_retries=max_retries, initial_backoff=1, max_backoff=60,
                raise_on_error=False, raise_on_exception=True, yield_ok=True,
            ):
                if ok:
                    indexed += 1
                else:
                    failed += 1
                    if len(errors) < 10:
                        text = str(item)[:4000]
                        errors.append((self.settings.scrub(text) if self.settings
                                       else scrub(text))[:300])
                bar.update(1)
            if refresh:
                self.client.indices.refresh(index=self.index)
        except InvalidInputError:
            raise
        except Exception as exc:
            raise self._fail(f"bulk indexing into {self.index!r} (after {indexed} documents)",
                             exc) from None
        finally:
            bar.close()
        seconds = time.perf_counter() - start
        logger.info("indexed %d passages into %r (%d failed) in %.1f s", indexed, self.index,
                    failed, seconds)
        return IndexReport(indexed, failed, seconds, self.index, errors)

    def index_corpus(
        self,
        path: str | Path,
        *,
        recreate: bool = False,
        chunk_size: int = 500,
        progress: bool = False,
        analyzer: str = "english",
    ) -> IndexReport:
        """Create the index (if needed) and index a JSON/JSONL or DPR ``.tsv`` corpus."""
        passages = read_corpus(path)  # validates the file before touching the server
        self.create_index(recreate=recreate, analyzer=analyzer)
        total = _count_lines(Path(path)) if progress else None
        return self.index_passages(passages, chunk_size=chunk_size, progress=progress,
                                   total=total)

    def count(self) -> int:
        """Documents in the index."""
        try:
            return int(self.client.count(index=self.index)["count"])
        except Exception as exc:
            raise self._fail(f"counting {self.index!r}", exc) from None

    # -- search -----------------------------------------------------------------------------

    def search(self, query: str, k: int) -> list[Passage]:
        """Top-``k`` passages for ``query``, best first, each with its BM25 score."""
        body = search_body(query, k, self.title_boost)
        try:
            response = self.client.search(index=self.index, **body)
        except Exception as exc:
            raise self._fail("search", exc) from None
        return [hit_to_passage(h) for h in response["hits"]["hits"]]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages for each query, in one ``_msearch`` request."""
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
            raise self._fail("multi-search", exc) from None
        out = []
        for i, item in enumerate(response["responses"]):
            if "error" in item:
                reason = str(item["error"])[:4000]
                reason = (self.settings.scrub(reason) if self.settings else scrub(reason))[:300]
                raise ElasticsearchRetrievalError(f"query {i} failed on the server: {reason}")
            out.append([hit_to_passage(h) for h in item["hits"]["hits"]])
        return out


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
