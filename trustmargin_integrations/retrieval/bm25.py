"""The embedded, in-process BM25 index (``bm25s``), saved to and loaded from a directory."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
from pydantic import ValidationError

from trustmargin_integrations import strict_json
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.extras import BM25, require
from trustmargin_integrations.files import write_text_atomic
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.validation import check_items, check_k, check_queries

if TYPE_CHECKING:
    import bm25s

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

    With JAX installed, importing bm25s would start XLA and take most of a GPU's memory
    (docs/decisions.md); BM25 top-k on numpy is what we want anyway. An application that
    uses JAX itself keeps its own modules: they are hidden only while bm25s is imported.
    """
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    with _without(_GPU_FRAMEWORKS):
        return importlib.import_module("bm25s")


# Checked before either engine loads: an install without the `bm25` extra gets the typed
# error naming it, not a ModuleNotFoundError from this import.
require("bm25", BM25, "BM25Index (the embedded BM25 retrieval)",
        ", or pass any retriever with search(query, k) (Elasticsearch, your own)")
Stemmer = importlib.import_module("Stemmer")
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
        passages = check_items(passages, "passages", Passage, what="Passage records",
                               empty_fix="index at least one passage",
                               item_fix="build Passage(id=..., title=..., text=...)")
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
        """Load an index written by :meth:`save`.

        A damaged or tampered directory (a file missing, cut or rewritten, passages that are
        not the index's documents) is an :class:`InvalidInputError` naming it, never a
        traceback at load time or a wrong passage at search time.
        """
        src = Path(directory)
        meta = src / _META
        if not meta.is_file():
            raise InvalidInputError("index", f"{src} holds no TrustMargin BM25 index",
                                    "build one with `trustmargin index --corpus FILE --out DIR`")
        passages = _stored_passages(meta)
        try:
            retriever = bm25s.BM25.load(str(src))
        except Exception as exc:  # bm25s reads numpy and JSON files: any of their errors
            raise _damaged(src, f"bm25s could not read it ({type(exc).__name__}: "
                           f"{str(exc)[:120]})") from None
        _check_matrix(retriever, len(passages), src)
        return cls(retriever, passages)

    def search(self, query: str, k: int) -> list[Passage]:
        """Top-``k`` passages, best first, each with its BM25 score."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages for each query."""
        queries = check_queries(queries)
        k = min(check_k(k), len(self.passages))
        if not queries:
            return []
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


def _damaged(src: Path, problem: str) -> InvalidInputError:
    return InvalidInputError("index", f"{src} is damaged: {problem}",
                             "build it again with `trustmargin index --corpus FILE --out DIR` "
                             "(or BM25Index.from_corpus(...).save(DIR))")


def _stored_passages(meta: Path) -> list[Passage]:
    """The passages :meth:`BM25Index.save` wrote, checked record by record."""
    records = strict_json.loads(meta.read_bytes(), str(meta),
                                "build the index again with `trustmargin index`")
    if not isinstance(records, list) or not records:
        raise _damaged(meta.parent, f"{_META} holds no list of passages")
    passages = []
    for i, record in enumerate(records):
        try:
            if not isinstance(record, dict):
                raise TypeError(f"a {type(record).__name__}, not an object")
            passages.append(Passage.model_validate(record))
        except (TypeError, ValidationError) as exc:
            raise _damaged(meta.parent, f"passage {i} of {_META} is not a passage record "
                           f"({str(exc).splitlines()[0][:120]})") from None
    return passages


def _check_matrix(retriever: bm25s.BM25, documents: int, src: Path) -> None:
    """The score matrix must be one over exactly the stored passages: a document number
    past them would fail at search time, passages of another index would be returned for
    this one's documents."""
    scores = getattr(retriever, "scores", None)
    try:
        num_docs = int(scores["num_docs"])  # type: ignore[index]
        data, indices, indptr = (np.asarray(scores[key])  # type: ignore[index]
                                 for key in ("data", "indices", "indptr"))
    except (TypeError, KeyError, ValueError) as exc:
        raise _damaged(src, f"its score matrix is incomplete ({exc})") from None
    if num_docs != documents:
        raise _damaged(src, f"the score matrix covers {num_docs:,} documents but "
                       f"{_META} holds {documents:,} passages")
    vocabulary = getattr(retriever, "vocab_dict", None)
    columns = len(indptr) - 1
    # One column per word, numbered 0..columns-1 (bm25s keeps "" in the vocabulary
    # without one): a word without its column fails at search time, a column without its
    # word is a word no query can find.
    ids = [i for word, i in vocabulary.items() if word] if isinstance(vocabulary, dict) else []
    problem = None
    if indptr.ndim != 1 or columns < 1 or not ids:
        problem = "its score matrix or vocabulary is empty"
    elif len(ids) != columns or any(not isinstance(i, int) or not 0 <= i < columns
                                    for i in ids) or len(set(ids)) != columns:
        problem = f"its vocabulary of {len(ids):,} words does not number its {columns:,} columns"
    elif len(data) != len(indices) or int(indptr[0]) != 0 or int(indptr[-1]) != len(data):
        problem = "the column pointers do not match the stored scores"
    elif len(indptr) > 1 and bool(np.any(np.diff(indptr) < 0)):
        problem = "the column pointers go backwards"
    elif len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= documents):
        problem = "a score names a document that does not exist"
    elif not bool(np.all(np.isfinite(data))):
        problem = "a stored score is not a finite number"
    if problem is not None:
        raise _damaged(src, problem)
