"""Building an index: create it with the passage mapping, then bulk-load a corpus."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.retrieval.elasticsearch.connection import (
    ElasticsearchSettings,
    request_failed,
    scrubbed_detail,
)
from trustmargin_integrations.retrieval.elasticsearch.corpus_files import count_rows, read_corpus
from trustmargin_integrations.retrieval.elasticsearch.queries import bulk_actions, index_body
from trustmargin_integrations.schema import Passage

# The package's name, which the indexing records have always carried and which
# urls.protect_logs filters (a filter sees only its own logger's records, not a child's).
logger = logging.getLogger(__package__)


@dataclass
class IndexReport:
    """What :meth:`ElasticsearchRetriever.index_passages` did."""

    indexed: int
    failed: int
    seconds: float
    index: str
    errors: list[str] = field(default_factory=list)


class IndexingMixin:
    """``create_index``, ``index_passages`` and ``index_corpus`` of
    :class:`~.retriever.ElasticsearchRetriever`.

    Needs ``self.client`` (an ``elasticsearch.Elasticsearch``), ``self.index`` (the index name)
    and ``self.settings`` (to scrub secrets from errors; may be None).
    """

    client: Any
    index: str
    settings: ElasticsearchSettings | None

    def create_index(self, *, recreate: bool = False, analyzer: str = "english") -> bool:
        """Create the index with :func:`~.queries.index_body`; True when it was created now."""
        try:
            exists = bool(self.client.indices.exists(index=self.index))
            if exists and not recreate:
                return False
            if exists:
                self.client.indices.delete(index=self.index)
            self.client.indices.create(index=self.index, **index_body(analyzer))
        except Exception as exc:
            raise request_failed(f"creating index {self.index!r}", exc, self.settings,
                                 self.index) from None
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
                        errors.append(scrubbed_detail(str(item), self.settings))
                bar.update(1)
            if refresh:
                self.client.indices.refresh(index=self.index)
        except InvalidInputError:
            raise
        except Exception as exc:
            raise request_failed(f"bulk indexing into {self.index!r} (after {indexed} documents)",
                                 exc, self.settings, self.index) from None
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
        total = count_rows(Path(path)) if progress else None
        return self.index_passages(passages, chunk_size=chunk_size, progress=progress,
                                   total=total)
