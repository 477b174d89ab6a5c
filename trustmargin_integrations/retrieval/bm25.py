"""The embedded, in-process BM25 index (``bm25s``), saved to and loaded from a directory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import bm25s
import Stemmer

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.schema import Passage

_META = "trustmargin_passages.json"


class BM25Index:
    """BM25 over ``title + text`` with English stemming and stopwords.

    Example:
        >>> index = BM25Index.build([Passage(id="0", title="Paris", text="Capital of France.")])
        >>> index.search("capital of France", k=1)[0].title
        'Paris'
    """

    def __init__(self, retriever: bm25s.BM25, passages: Sequence[Passage]) -> None:
        self._retriever = retriever
        self.passages = list(passages)
        self._stemmer = Stemmer.Stemmer("english")

    def __len__(self) -> int:
        return len(self.passages)

    @staticmethod
    def _document(p: Passage) -> str:
        return f"{p.title} {p.text}" if p.title else p.text

    @classmethod
    def build(cls, passages: Sequence[Passage], *, show_progress: bool = False) -> BM25Index:
        """Index passages in memory."""
        if not passages:
            raise InvalidInputError("passages", "is empty", "index at least one passage")
        stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize([cls._document(p) for p in passages], stopwords="en",
                                stemmer=stemmer, show_progress=show_progress)
        if not tokens.vocab:
            raise InvalidInputError("passages", "contain no indexable word (only stopwords, "
                                    "punctuation or one-letter tokens)",
                                    "index passages with real text")
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=show_progress)
        return cls(retriever, passages)

    @classmethod
    def from_corpus(cls, path: str | Path, *, show_progress: bool = False) -> BM25Index:
        """Build from a JSON/JSONL ``{title, text}`` corpus file."""
        from trustmargin_integrations.retrieval.corpus import load_corpus

        return cls.build(load_corpus(path), show_progress=show_progress)

    def save(self, directory: str | Path) -> Path:
        """Write the index and its passages to ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        self._retriever.save(str(out))
        tmp = out / (_META + ".tmp")
        tmp.write_text(json.dumps([p.model_dump() for p in self.passages]), encoding="utf-8")
        tmp.replace(out / _META)
        return out

    @classmethod
    def load(cls, directory: str | Path) -> BM25Index:
        """Load an index written by :meth:`save`."""
        src = Path(directory)
        meta = src / _META
        if not meta.is_file():
            raise InvalidInputError("index", f"{src} holds no TrustMargin BM25 index",
                                    "build one with `trustmargin index --corpus FILE --out DIR`")
        passages = [Passage(**p) for p in json.loads(meta.read_text(encoding="utf-8"))]
        return cls(bm25s.BM25.load(str(src)), passages)

    def search(self, query: str, k: int) -> list[Passage]:
        """Top-``k`` passages, best first, each with its BM25 score."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages for each query."""
        if k < 1:
            raise InvalidInputError("k", f"must be >= 1, got {k}", "ask for at least one passage")
        for i, q in enumerate(queries):
            if not isinstance(q, str) or not q.strip():
                raise InvalidInputError(f"queries[{i}]", "is empty or not a string",
                                        "pass a non-empty query string")
        k = min(k, len(self.passages))
        tokens = bm25s.tokenize(list(queries), stopwords="en", stemmer=self._stemmer,
                                show_progress=False)
        results: list[list[Passage]] = []
        ids, scores = self._retriever.retrieve(tokens, k=k, show_progress=False)
        for row_ids, row_scores in zip(ids, scores, strict=True):
            hits = []
            for doc, score in zip(row_ids, row_scores, strict=True):
                # bm25s pads with zero-score hits when a query matches fewer than k documents.
                if float(score) <= 0.0:
                    continue
                hits.append(self.passages[int(doc)].model_copy(update={"score": float(score)}))
            results.append(hits)
        return results
