"""The three views equal the paper's appendix templates character for character."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.context import build_context, build_contexts
from trustmargin_integrations.prompts import (
    CONTEXT_ONLY_TEMPLATE,
    QUESTION_CONTEXT_TEMPLATE,
    QUESTION_ONLY_TEMPLATE,
    join_passages,
    view_texts,
)

PAPER = Path(__file__).resolve().parents[2] / "shared" / "spec" / "trustmargin_paper.tex"


def _appendix_block(title: str) -> str:
    tex = PAPER.read_text(encoding="utf-8")
    match = re.search(
        r"title=" + re.escape(title)
        + r"\]\s*\\begin\{Verbatim\}\[[^\]]*\]\n(.*?)\\end\{Verbatim\}",
        tex, re.S,
    )
    assert match, f"appendix block {title!r} not found in the paper"
    return match.group(1).rstrip("\n")


@pytest.fixture(autouse=True)
def _paper_present() -> None:
    if not PAPER.is_file():
        pytest.fail(f"the specification {PAPER} is missing; it lives in ../shared/spec")


@pytest.mark.parametrize(
    ("title", "template"),
    [
        ("Question-only Prompt", QUESTION_ONLY_TEMPLATE),
        ("Question-Context Prompt", QUESTION_CONTEXT_TEMPLATE),
        ("Context-only Scoring Prompt", CONTEXT_ONLY_TEMPLATE),
    ],
)
def test_templates_equal_the_appendix(title: str, template: str) -> None:
    assert template == _appendix_block(title)


def test_context_concatenation_equals_the_appendix() -> None:
    block = _appendix_block("Concatenated Context").splitlines()
    ours = join_passages([f"{{passage_{i}}}" for i in range(20)]).splitlines()
    assert block[:2] == ours[:2]
    assert block[-1] == ours[-1]
    assert block[2] == "..."


def test_view_texts_fill_every_placeholder() -> None:
    views = view_texts("Who? {not a field}", "Passage 0: a {brace}")
    assert "Who? {not a field}" in views.question_only
    assert "Passage 0: a {brace}" in views.question_context
    assert "Who?" not in views.context_only
    assert "{question}" not in views.question_context and "{context}" not in views.context_only


def test_context_is_cut_on_a_passage_boundary() -> None:
    words = lambda s: len(s.split())  # noqa: E731 - a whitespace tokenizer is enough here
    passages = ["one two three", "four five six", "seven eight nine"]
    built = build_context(passages, words, max_tokens=12)  # two passages take 10 words
    assert built.passages_used == 2 and built.passages_given == 3
    assert built.text == "Passage 0: one two three\nPassage 1: four five six"
    assert not built.truncated and built.num_tokens == 10


def test_first_passage_over_budget_is_truncated_and_says_so() -> None:
    words = lambda s: len(s.split())  # noqa: E731
    cut = lambda s, n: " ".join(s.split()[:n])  # noqa: E731
    built = build_context(["a b c d e f g h i j"], words, max_tokens=5, truncate_tokens=cut)
    assert built.truncated and built.passages_used == 1
    assert built.num_tokens <= 5
    assert built.text.startswith("Passage 0: a b")


def test_context_builder_matches_brute_force_greedy(backend: HFBackend) -> None:
    """The linear builder (batched per-line counts, then exact checks) picks exactly the
    passages the quadratic greedy builder (count every prefix) picks, at every budget."""
    import random

    rng = random.Random(7)
    words = ["Paris", "capital", "1987", "naïve", "résumé", "\u6a4b", "—", "e.g.", "U.S.",
             "bridge", "Okonkwo", "'s", "(film)", "\t", "…", "x" * 30]
    passages = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
                for _ in range(30)]

    def greedy(budget: int) -> int:
        used = 0
        for n in range(1, len(passages) + 1):
            if backend.count_tokens(join_passages(passages[:n])) > budget:
                break
            used = n
        return used

    for budget in (16, 40, 100, 333, 700, 5000):
        built = build_context(passages, backend.count_tokens, budget, backend.truncate_tokens,
                              backend.count_tokens_batch)
        expected = greedy(budget)
        if expected:
            assert (built.passages_used, built.truncated) == (expected, False), budget
            assert built.num_tokens == backend.count_tokens(built.text) <= budget
        else:
            assert built.truncated and built.passages_used == 1


def test_contexts_of_many_questions_are_built_in_two_tokenizer_calls(
        backend: HFBackend) -> None:
    """``build_contexts`` gives each question exactly what ``build_context`` gives it alone
    (every budget case: all fit, some dropped, the first cut, no passages), while counting
    every question's passage lines in one batched call and their joins in a second."""
    import random

    rng = random.Random(11)
    words = ["Paris", "capital", "1987", "naïve", "\u6a4b", "—", "U.S.", "bridge", "'s", "…"]
    lists = [[" ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
              for _ in range(rng.randint(1, 12))] for _ in range(9)] + [[]]
    budgets = [rng.choice((12, 50, 200, 4000)) for _ in lists]
    calls: list[int] = []

    def counting_batch(texts: list[str]) -> list[int]:
        calls.append(len(texts))
        return backend.count_tokens_batch(texts)

    together = build_contexts(lists, budgets, backend.count_tokens, backend.truncate_tokens,
                              counting_batch)
    alone = [build_context(ps, backend.count_tokens, b, backend.truncate_tokens,
                           backend.count_tokens_batch)
             for ps, b in zip(lists, budgets, strict=True)]
    assert together == alone
    assert len(calls) == 2 and calls[0] == sum(map(len, lists))
    kinds = {("cut" if c.truncated else "all" if c.passages_used == c.passages_given
              else "some") for c in together}
    assert kinds == {"cut", "all", "some"}  # the seed covers every case
    with pytest.raises(ValueError, match="one budget per passage list"):
        build_contexts(lists, budgets[:-1], backend.count_tokens)
