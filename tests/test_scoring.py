"""The fast shared-prefix path agrees with plain forward passes on the real SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.answers import answer_complete, clean_answer
from trustmargin_integrations.arbiter.comparisons import clause_piece
from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.backends.hf.masks import uses_bool_masks
from trustmargin_integrations.comparison import Span, clause_start
from trustmargin_integrations.schema import Decision

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "raw"
TOL = 1e-4
VIEWS = ("question_only", "question_context", "context_only")


def six_requests(
    views: object, direct: str, rag: str
) -> list[tuple[str, str, ContinuationRequest]]:
    """The six (candidate, view) scoring requests of one question, for the plain path."""
    return [(cand, view, ContinuationRequest(getattr(views, view), answer))
            for cand, answer in (("direct", direct), ("rag", rag)) for view in VIEWS]


def _cwq(n: int) -> list[dict]:
    records = json.loads((DATA / "prag" / "complexwebquestions_total.json").read_text())
    return [{"question": r["question"], "passages": r["passages"]} for r in records[:n]]


def _span_request(prompt: str, d: Decision, cand: str) -> ContinuationRequest:
    """The plain request of one compared span: the prompt and the text of its clause before
    the span, then the span (the product's own rule for what a span is scored after; this
    test checks the numbers of the fast path against a plain forward pass)."""
    text = getattr(d, f"{cand}_raw") or getattr(d, f"{cand}_answer")
    [(start, end)] = getattr(d, f"{cand}_spans")
    [piece] = clause_piece(text, Span(start, end), clause_start(text, start))
    return ContinuationRequest(prompt + piece.prefix, piece.text)


def _assert_matches_reference(tm: TrustMargin, backend: HFBackend, inputs: list[dict]) -> None:
    decisions = tm.arbitrate_batch(inputs)
    checked = 0
    for item, d in zip(inputs, decisions, strict=True):
        if d.direct_likelihoods is None:
            continue
        views = tm.prepare(item).views
        reqs = six_requests(views, d.direct_answer, d.rag_answer)
        if d.direct_spans is not None:
            # A chain's texts compared where they differ: each span after its own text.
            reqs = [(cand, view, _span_request(getattr(views, view), d, cand))
                    for cand, view, _ in reqs]
        reference = backend.score_continuations([r for _, _, r in reqs])
        for (cand, view, _), ref in zip(reqs, reference, strict=True):
            fast = getattr(getattr(d, f"{cand}_likelihoods"), view)
            assert fast == pytest.approx(ref.mean, abs=TOL), (cand, view)
            checked += 1
    assert checked >= 12, "too few scored questions to compare"


@pytest.mark.slow
def test_fast_path_equals_reference_with_generation(tm: TrustMargin, backend: HFBackend) -> None:
    _assert_matches_reference(tm, backend, _cwq(3))


@pytest.mark.slow
def test_fast_path_equals_reference_with_given_candidates(
    tm: TrustMargin, backend: HFBackend
) -> None:
    inputs = _cwq(3)
    inputs[0] |= {"direct_answer": "Islamabad", "rag_answer": "Sardar Masood Khan"}
    inputs[1] |= {"direct_answer": "Vanderbilt Commodores", "rag_answer": None}
    inputs[2] |= {"direct_answer": None, "rag_answer": "Chile"}
    _assert_matches_reference(tm, backend, inputs)


@pytest.mark.slow
def test_fast_and_plain_sessions_agree(backend: HFBackend) -> None:
    """The same session calls, with the cache-branching planner on and off."""
    tm = TrustMargin(backend)
    prepared = [tm.prepare(x) for x in _cwq(2)]
    results = {}
    for fast in (True, False):
        backend.fast = fast
        try:
            with backend.session() as session:
                direct = session.generate([p.views.question_only for p in prepared], 20,
                                          stop=answer_complete)
                rag = session.generate([p.views.question_context for p in prepared], 20,
                                       stop=answer_complete)
                reqs = [r for p, d, g in zip(prepared, direct, rag, strict=True)
                        for _, _, r in six_requests(p.views, clean_answer(d), clean_answer(g))]
                results[fast] = (direct, rag, session.score(reqs))
        finally:
            backend.fast = True
    (fd, fr, fs), (pd, pr, ps) = results[True], results[False]
    assert (fd, fr) == (pd, pr)
    assert len(fs) == len(ps) == 12
    for f, p in zip(fs, ps, strict=True):
        assert f.num_tokens == p.num_tokens
        assert f.mean == pytest.approx(p.mean, abs=TOL)


@pytest.mark.slow
def test_session_scores_any_request_shape(backend: HFBackend) -> None:
    """Prompts with no generation cache, repeated prompts, duplicate and empty answers: the
    planner prefills what no cache covers and branches the rest, and every number equals the
    plain forward pass."""
    tm = TrustMargin(backend)
    views = [tm.prepare(x).views for x in _cwq(2)]
    long_question = backend.render_prompt("Question:\n" + "why " * 200 + "?\n\nAnswer:")
    reqs = [
        ContinuationRequest(views[0].context_only, "Islamabad"),
        ContinuationRequest(views[0].question_only, "Islamabad"),
        ContinuationRequest(views[0].question_only, "Islamabad"),
        ContinuationRequest(views[1].question_context, "Chile"),
        ContinuationRequest(views[1].question_context, ""),
        ContinuationRequest(views[0].question_context, "Sardar Masood Khan"),
        ContinuationRequest(long_question, "because"),
    ]
    with backend.session() as session:
        session.generate([views[1].question_only], 5)  # one cache that most requests miss
        fast = session.score(reqs)
    plain = backend.score_continuations(reqs)
    assert [f.num_tokens for f in fast] == [p.num_tokens for p in plain]
    assert fast[4].num_tokens == 0
    for f, p in zip(fast, plain, strict=True):
        if p.num_tokens:
            assert f.mean == pytest.approx(p.mean, abs=TOL)


@pytest.mark.slow
def test_batch_of_n_equals_n_single_calls(tm: TrustMargin) -> None:
    inputs = _cwq(3)
    batched = TrustMargin(tm.backend, TrustMarginConfig(batch_size=3)).arbitrate_batch(inputs)
    singles = [tm.arbitrate(**x) for x in inputs]
    for b, s in zip(batched, singles, strict=True):
        assert (b.direct_answer, b.rag_answer, b.answer, b.source) == (
            s.direct_answer, s.rag_answer, s.answer, s.source)
        if b.m is not None:
            assert b.m == pytest.approx(s.m, abs=TOL)


def test_greedy_generation_matches_transformers_generate(backend: HFBackend) -> None:
    import torch

    prompt = backend.render_prompt("Question:\nWhat is the capital of France?\n\nAnswer:")
    ours = backend.generate([prompt], max_new_tokens=20, stop=answer_complete)[0]
    ids = torch.tensor([backend.encode_prompt(prompt)])
    with torch.inference_mode():
        out = backend.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=20, num_beams=1)
    theirs = backend.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    # The arbiter stops once the first answer line is complete: the cleaner keeps the same.
    assert clean_answer(ours) == clean_answer(theirs)
    assert theirs.startswith(ours)
    assert backend.generate([prompt], max_new_tokens=20)[0] == theirs


@pytest.mark.slow
def test_generation_is_deterministic_and_batch_invariant(backend: HFBackend) -> None:
    prompts = [backend.render_prompt(f"Question:\n{q}\n\nAnswer:")
               for q in ("Who wrote Hamlet?", "What is the largest ocean on Earth by area?")]
    first = backend.generate(prompts, max_new_tokens=12)
    assert first == backend.generate(prompts, max_new_tokens=12)
    assert first == [backend.generate([p], max_new_tokens=12)[0] for p in prompts]


@pytest.mark.slow
def test_eager_attention_uses_an_additive_mask_and_still_agrees(
    tm: TrustMargin, backend: HFBackend
) -> None:
    config = backend.model.config
    before = config._attn_implementation
    config._attn_implementation = "eager"  # the kernel some models only have
    try:
        assert not uses_bool_masks(backend.model)
        _assert_matches_reference(tm, backend, _cwq(3))
    finally:
        config._attn_implementation = before


FRAMES = ["", "Hello! ", "Gerne! Die Antwort lautet: "]


@pytest.mark.slow
def test_framed_copies_of_questions_branch_off_shared_prompts(backend: HFBackend) -> None:
    """Given chat texts under several framings (the framing suite, a chain's answers): the
    framed copies of one view branch off one prefilled prompt, the stems are spread over the
    rows of a pass, and every likelihood equals the plain forward pass."""
    from trustmargin_integrations.backends.hf import tree

    tm = TrustMargin(backend, TrustMarginConfig(max_context_tokens=96))
    prepared = [tm.prepare(x) for x in _cwq(3)]
    requests = [ContinuationRequest(getattr(p.views, view) + frame, answer)
                for p in prepared for view in VIEWS for frame in FRAMES
                for answer in (" Paris", " Lyon")]
    encoded = {r.prompt: backend.encode_prompt(r.prompt) for r in requests}
    by_prompt = tree.requests_by_prompt(backend.loaded, requests)
    caches: list[tree.CachedPrompts] = []
    plan = tree._plan(backend.loaded, by_prompt, encoded, caches)
    computed = sum(len(c.prompts) * c.batch.width for c in caches)
    for rows in plan.values():
        spans = [sum(stem.length for stem, _ in stems) for stems in rows.values()]
        # No row carries the others' stems (a pass costs its rows x its longest row): piling
        # every short prompt's stem on the first row made one row 6x the median here.
        assert max(spans) <= 2 * sorted(spans)[len(spans) // 2] + 16, spans
        computed += tree.packed_tokens(tree.split_into_lanes(rows))
    # Each prompt on its own would feed every token of every prompt; sharing the prefixes the
    # framed copies have in common computes under 40% of that here (64% before the
    # prefills and the balance, 31% with them).
    assert computed <= 0.4 * sum(len(ids) for ids in encoded.values())
    _assert_fast_equals_plain(backend, requests)


@pytest.mark.slow
def test_a_row_of_long_answers_is_split_over_copies_of_it(backend: HFBackend) -> None:
    """One question whose two answers are long (a chain's paragraphs, each under three
    framings) beside three with one-word answers: its stems go into several lanes that copy
    its cached row, the pass packs fewer tokens than one lane per row (which padded the
    short rows to the long one), and every likelihood still equals the plain forward
    pass."""
    from trustmargin_integrations.backends.hf import tree

    tm = TrustMargin(backend, TrustMarginConfig(max_context_tokens=96))
    prepared = [tm.prepare(x) for x in _cwq(4)]
    long = " The answer is " + ", then ".join(f"the {k}th of the lakes near Venn" for k in
                                                range(12))
    requests = [ContinuationRequest(p.views.question_context + frame, answer)
                for i, p in enumerate(prepared) for frame in FRAMES
                for answer in ((long, long.replace("Venn", "Dorr")) if i == 0
                               else (" Paris", " Lyon"))]
    encoded = {r.prompt: backend.encode_prompt(r.prompt) for r in requests}
    caches: list[tree.CachedPrompts] = []
    plan = tree._plan(backend.loaded, tree.requests_by_prompt(backend.loaded, requests),
                      encoded, caches)
    [rows] = plan.values()
    lanes = tree.split_into_lanes(rows)
    served = [row for row, _ in lanes]
    assert len(served) > len(set(served)), served  # a row copied into several lanes
    assert tree.packed_tokens(lanes) < 0.7 * tree.packed_tokens(list(rows.items()))
    assert len(lanes) <= 2 * len(rows)  # the copies are bounded (each holds the row again)
    _assert_fast_equals_plain(backend, requests)


def _assert_fast_equals_plain(backend: HFBackend, requests: list[ContinuationRequest]) -> None:
    """Every request's likelihood through a session equals one plain forward pass's."""
    with backend.session() as session:
        fast = session.score(requests)
    plain = backend.score_continuations(requests)
    for f, p in zip(fast, plain, strict=True):
        assert f.num_tokens == p.num_tokens
        assert f.mean == pytest.approx(p.mean, abs=TOL)


def test_lanes_pack_no_more_than_one_lane_per_row() -> None:
    """The lane choice on its own (no model): every stem is placed once, in a lane of its
    own row; the lanes never pack more tokens than one lane per row did, and at most two per
    row served; rows of equal load stay one lane each, and one long row beside short ones is
    split."""
    from trustmargin_integrations.backends.hf.tree import Stem, packed_tokens, split_into_lanes

    def stem(feed: int, answer: int) -> Stem:
        return Stem(100, tuple(range(feed)), (tuple(range(answer)),))

    even = {r: [(stem(5, 10), [r])] * 3 for r in range(4)}
    assert [row for row, _ in split_into_lanes(even)] == [0, 1, 2, 3]
    uneven = {0: [(stem(20, 40), [k]) for k in range(6)],
              **{r: [(stem(1, 3), [10 + r])] for r in range(1, 8)}}
    lanes = split_into_lanes(uneven)
    assert sorted((row, n) for row, stems in lanes for _, ns in stems for n in ns) == sorted(
        (row, n) for row, stems in uneven.items() for _, ns in stems for n in ns)
    assert packed_tokens(lanes) < packed_tokens(list(uneven.items()))
    assert len(lanes) <= 2 * len(uneven)
