"""The embedded, in-process BM25 index (``bm25s``), saved to and loaded from a directory."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import Stemmer

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import write_text_atomic
from trustmargin_integrations.schema import Passage

_META = "trustmargin_passages.json"
# What bm25s.BM25.save writes into the folder (its default names), besides our passages.
_BM25S_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy",
                "vocab.index.json", "params.index.json", "nonoccurrence_array.index.npy")
_GPU_FRAMEWORKS = ("jax", "jax.lax")


@contextmanager
def _without(modules: Sequence[str]) -> Iterator[None]:
    """Make ``import`` of ``modules`` fail inside the block; restore sys.modules after."""
    missing = object()
    saved = {name: sys.modules.get(name, missing) for name in modules}
    for name in modules:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "absent"
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is missing:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old  # type: ignore[assignment]


def _load_bm25s() -> ModuleType:
    """Import bm25s without letting it start JAX.

    When JAX is installed, bm25s runs a ``jax.lax.top_k`` at import time; on a GPU machine
    that starts XLA, which preallocates 75% of the GPU's memory for a CPU-side index (60 of
    80 GB measured on an H100, leaving the model out of memory). BM25 top-k on numpy is
    what we want anyway. An application that uses JAX itself keeps its own modules: they are
    hidden only while bm25s is imported.
    """
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    with _without(_GPU_FRAMEWORKS):
        return importlib.import_module("bm25s")


bm25s = _load_bm25s()


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
        if isinstance(passages, (str, bytes)) or not isinstance(passages, Sequence):
            raise InvalidInputError("passages", f"must be a list of Passage records, got a "
                                    f"{type(passages).__name__}", "pass a list of Passage")
        if not passages:
            raise InvalidInputError("passages", "is empty", "index at least one passage")
        for i, p in enumerate(passages):
            if not isinstance(p, Passage):
                raise InvalidInputError(f"passages[{i}]", f"is a {type(p).__name__}, not a "
                                        "Passage", "build Passage(id=..., title=..., text=...)")
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

    @staticmethod
    def files(directory: str | Path) -> list[Path]:
        """The files :meth:`save` writes into ``directory`` (for the output guard)."""
        return [Path(directory) / name for name in (*_BM25S_FILES, _META)]

    def save(self, directory: str | Path) -> Path:
        """Write the index and its passages to ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        self._retriever.save(str(out))
        write_text_atomic(out / _META, json.dumps([p.model_dump() for p in self.passages]))
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
        ids, scores = self._retriever.retrieve(tokens, k=k, show_progress=False,
                                               backend_selection="numpy")
        for row_ids, row_scores in zip(ids, scores, strict=True):
            hits = []
            for doc, score in zip(row_ids, row_scores, strict=True):
                # bm25s pads with zero-score hits when a query matches fewer than k documents.
                if float(score) <= 0.0:
                    continue
                hits.append(self.passages[int(doc)].model_copy(update={"score": float(score)}))
            results.append(hits)
        return results
