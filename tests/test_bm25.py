"""The embedded BM25 index over a real corpus (the shared 2Wiki paragraphs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trustmargin_integrations import BM25Index, InvalidInputError, Passage
from trustmargin_integrations.retrieval import load_corpus

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "raw" / "hipporag" / \
    "2wikimultihopqa_corpus.json"


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.from_corpus(CORPUS)


def test_search_finds_the_paragraph_by_its_title(index: BM25Index) -> None:
    target = index.passages[1234]
    hits = index.search(f"{target.title} {target.text[:80]}", k=5)
    assert hits[0].id == target.id and hits[0].title == target.title
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and all(s is not None and s > 0 for s in scores)


def test_save_load_round_trip(index: BM25Index, tmp_path: Path) -> None:
    index.save(tmp_path / "ix")
    loaded = BM25Index.load(tmp_path / "ix")
    assert len(loaded) == len(index) == 6119
    query = "Which film came out first?"
    assert [p.id for p in loaded.search(query, 10)] == [p.id for p in index.search(query, 10)]


def test_batch_equals_single_and_k_is_capped() -> None:
    small = BM25Index.build([Passage(id="a", title="Paris", text="Capital of France."),
                             Passage(id="b", title="Berlin", text="Capital of Germany.")])
    assert small.search_batch(["France", "Germany"], 1) == [small.search("France", 1),
                                                           small.search("Germany", 1)]
    assert [p.id for p in small.search("capital", 10)] in (["a", "b"], ["b", "a"])
    assert small.search("zebra", 3) == []  # no zero-score filler hits


def test_bad_queries_and_corpora(tmp_path: Path) -> None:
    small = BM25Index.build([Passage(id="a", text="Capital of France.")])
    with pytest.raises(InvalidInputError, match=r"queries\[0\]"):
        small.search("  ", 3)
    with pytest.raises(InvalidInputError, match="k: must be a positive integer"):
        small.search("France", 0)
    with pytest.raises(InvalidInputError, match="indexable"):
        BM25Index.build([Passage(id="x", text="x")])
    with pytest.raises(InvalidInputError, match="no TrustMargin BM25 index"):
        BM25Index.load(tmp_path)
    bad = tmp_path / "c.jsonl"
    bad.write_text(json.dumps({"title": "t", "text": "fine"}) + "\n{broken\n")
    with pytest.raises(InvalidInputError, match=r"c.jsonl:2"):
        load_corpus(bad)
    missing = tmp_path / "m.json"
    missing.write_text(json.dumps([{"title": "no text here"}]))
    with pytest.raises(InvalidInputError, match=r"\[0\]\.text"):
        load_corpus(missing)
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_corpus(tmp_path / "absent.json")


def test_retrieval_never_imports_a_gpu_framework(tmp_path: Path) -> None:
    """bm25s starts JAX at import time when JAX is installed (60 of 80 GB of an H100 taken
    before any model ran). JAX is not installed here, so a stand-in ``jax`` package that
    records every import of it takes its place on sys.path (a fake, because the real JAX
    cannot run on this machine); indexing, saving, loading and searching must not touch it,
    nor import torch, and an application's own later ``import jax`` must still work."""
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    marker = tmp_path / "jax-imported"
    (fake / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write('jax\\n')\n")
    (fake / "lax.py").write_text(
        f"open({str(marker)!r}, 'a').write('jax.lax\\n')\n"
        "def top_k(x, k):\n    raise RuntimeError('JAX computation started')\n")
    script = f"""
import sys
from trustmargin_integrations.retrieval.bm25 import BM25Index
from trustmargin_integrations.schema import Passage
index = BM25Index.build([Passage(id="a", text="Paris is the capital of France."),
                         Passage(id="b", text="Berlin is the capital of Germany.")])
index.save({str(tmp_path / "ix")!r})
hits = BM25Index.load({str(tmp_path / "ix")!r}).search("capital of France", 1)
assert hits[0].id == "a", hits
loaded = sorted(m for m in ("jax", "jax.lax", "torch", "tensorflow", "cupy")
                if sys.modules.get(m) is not None)
assert not loaded, loaded
import jax  # the application's own import still works afterwards
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    # Only the application's own import at the end reached the stand-in.
    assert marker.read_text().split() == ["jax"]


# -- typed errors for bad k, damaged indexes and non-UTF-8 files -------------------------------

SMALL = [Passage(id="a", title="Paris", text="Paris is the capital of France."),
         Passage(id="b", title="Berlin", text="Berlin is the capital of Germany."),
         Passage(id="c", title="Rome", text="Rome is the capital of Italy.")]


@pytest.mark.parametrize("k", [None, 1.5, True, "3"])
def test_a_k_that_is_not_a_positive_integer_is_a_typed_error(k: object) -> None:
    index = BM25Index.build(SMALL)
    for search in (lambda: index.search("capital", k),  # type: ignore[arg-type]
                   lambda: index.search_batch(["capital"], k)):  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError) as err:
            search()
        assert err.value.field == "k"


def test_a_single_string_is_not_searched_character_by_character() -> None:
    index = BM25Index.build(SMALL)
    with pytest.raises(InvalidInputError) as err:
        index.search_batch("capital of France", 2)  # type: ignore[arg-type]
    assert err.value.field == "queries"
    with pytest.raises(InvalidInputError) as err:
        index.search("\u200b\ufeff", 2)  # invisible: blank
    assert err.value.field == "queries[0]"
    assert index.search_batch([], 2) == []


def _tamper(directory: Path, how: str) -> None:
    meta = directory / "trustmargin_passages.json"
    records = json.loads(meta.read_text())
    if how == "passages not JSON":
        meta.write_text("[{broken")
    elif how == "passages not a list":
        meta.write_text(json.dumps({"a": records}))
    elif how == "passage not an object":
        meta.write_text(json.dumps([*records[:2], "Rome"]))
    elif how == "passage without text":
        meta.write_text(json.dumps([*records[:2], {"id": "c", "title": "Rome"}]))
    elif how == "fewer passages":
        meta.write_text(json.dumps(records[:2]))
    elif how == "more passages":
        meta.write_text(json.dumps([*records, {**records[0], "id": "d"}]))
    elif how == "passages Latin-1":
        meta.write_bytes(json.dumps(records, ensure_ascii=False).replace(
            "Paris", "Pàris").encode("latin-1"))
    elif how == "matrix file missing":
        (directory / "data.csc.index.npy").unlink()
    elif how == "matrix file cut":
        path = directory / "indices.csc.index.npy"
        path.write_bytes(path.read_bytes()[:60])
    elif how == "params not JSON":
        (directory / "params.index.json").write_text("{")
    elif how == "document out of range":
        import numpy as np

        path = directory / "indices.csc.index.npy"
        indices = np.load(path)
        indices[0] = 99
        np.save(path, indices)
    elif how == "vocabulary cut":
        vocab = directory / "vocab.index.json"
        words = json.loads(vocab.read_text())
        vocab.write_text(json.dumps(dict(list(words.items())[:2])))


@pytest.mark.parametrize("how", [
    "passages not JSON", "passages not a list", "passage not an object", "passage without text",
    "fewer passages", "more passages", "passages Latin-1", "matrix file missing",
    "matrix file cut", "params not JSON", "document out of range", "vocabulary cut",
])
def test_a_damaged_index_directory_is_a_typed_error_at_load(tmp_path: Path, how: str) -> None:
    # Before: JSONDecodeError, TypeError, ValidationError, FileNotFoundError or ValueError
    # tracebacks at load, or an IndexError (or another corpus's passage) at search time.
    BM25Index.build(SMALL).save(tmp_path / "ix")
    _tamper(tmp_path / "ix", how)
    with pytest.raises(InvalidInputError) as err:
        BM25Index.load(tmp_path / "ix").search("capital of France", 3)
    assert str(tmp_path / "ix") in str(err.value) and "Fix:" in str(err.value)


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".tsv"])
def test_a_latin1_corpus_names_the_file_and_says_to_resave_as_utf8(tmp_path: Path,
                                                                   suffix: str) -> None:
    from trustmargin_integrations.retrieval.elasticsearch import read_corpus

    records = [{"title": "Goiás", "text": "Goiás is a state of Brazil."}]
    text = {".json": json.dumps(records, ensure_ascii=False),
            ".jsonl": json.dumps(records[0], ensure_ascii=False) + "\n",
            ".tsv": "id\ttext\ttitle\n1\tGoiás is a state of Brazil.\tGoiás\n"}[suffix]
    path = tmp_path / f"corpus{suffix}"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(InvalidInputError) as err:
        list(read_corpus(path))
    assert err.value.field.startswith(str(path))
    assert "not UTF-8" in err.value.problem and "re-save the file as UTF-8" in err.value.fix
    if suffix != ".tsv":
        # The line is named: a whole file's error counts it, a JSONL line's field is FILE:LINE.
        with pytest.raises(InvalidInputError) as err:
            load_corpus(path)
        assert err.value.field == f"{path}:1" if suffix == ".jsonl" else (
            err.value.field == str(path) and "line 1" in err.value.problem)
        with pytest.raises(InvalidInputError, match="not UTF-8"):
            BM25Index.from_corpus(path)
