"""The embedded BM25 index over a real corpus (the shared 2Wiki paragraphs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trustmargin_integrations import BM25Index, InvalidInputError, Passage, load_corpus

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
    with pytest.raises(InvalidInputError, match="k: must be >= 1"):
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
