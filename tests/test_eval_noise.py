"""Retrieval-noise injection is seeded and deterministic (no model needed)."""

from __future__ import annotations

import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.runner import inject_noise

PASSAGES = ["gold passage A", "gold passage B", "gold passage C"]
POOL = [*(f"random passage {i}" for i in range(50)), *PASSAGES]


def test_same_seed_same_corruption_and_other_seed_differs() -> None:
    first = inject_noise(PASSAGES, POOL, 2, seed=42, example_id="cwq:7")
    assert first == inject_noise(PASSAGES, POOL, 2, seed=42, example_id="cwq:7")
    others = {tuple(inject_noise(PASSAGES, POOL, 2, seed=s, example_id="cwq:7"))
              for s in range(43, 53)}
    assert any(other != tuple(first) for other in others)


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_exactly_n_passages_are_replaced_by_pool_passages(n: int) -> None:
    noisy = inject_noise(PASSAGES, POOL, n, seed=1, example_id="2wiki:3")
    assert len(noisy) == len(PASSAGES)
    kept = [a == b for a, b in zip(noisy, PASSAGES, strict=True)]
    assert kept.count(False) == n
    replaced = [p for p, same in zip(noisy, kept, strict=True) if not same]
    # Replacements come from the pool, never duplicate a retrieved passage.
    assert all(p in POOL and p not in PASSAGES for p in replaced)
    assert len(set(noisy)) == len(noisy)


def test_levels_are_independent_draws() -> None:
    one = inject_noise(PASSAGES, POOL, 1, seed=5, example_id="q")
    three = inject_noise(PASSAGES, POOL, 3, seed=5, example_id="q")
    assert sum(a != b for a, b in zip(three, PASSAGES, strict=True)) == 3
    assert one != three


def test_bad_levels_and_small_pools_are_typed_errors() -> None:
    with pytest.raises(InvalidInputError) as info:
        inject_noise(PASSAGES, POOL, 4, seed=0, example_id="q")
    assert info.value.field == "n_replace"
    with pytest.raises(InvalidInputError) as info:
        inject_noise(PASSAGES, [*PASSAGES, "only one"], 2, seed=0, example_id="q")
    assert info.value.field == "pool"
