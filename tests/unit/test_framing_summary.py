"""A framing suite's summary: the rate of keeping the bare side and the framed F1 against the
bare F1, each with its paired interval over the pairs (the pairs were sampled, not the framed
copies of one pair)."""

from __future__ import annotations

import pytest

from trustmargin_integrations.evaluation.framing import (
    FramingRow,
    invariance_table,
    suite_summary,
)


def _row(name: str, kept: list[bool], f1: list[float]) -> FramingRow:
    return FramingRow(name, text_blind=0.5, pair_f1=f1, kept_by_pair=kept)


def test_the_summary_pools_the_framings_per_pair_and_pairs_framed_with_bare_f1() -> None:
    rows = [_row("a", [True, True, False, True], [1.0, 0.0, 0.0, 1.0]),
            _row("b", [True, False, False, True], [1.0, 0.0, 1.0, 1.0])]
    bare = [1.0, 0.0, 0.0, 1.0]
    s = suite_summary(rows, bare)
    assert (s.kept, s.compared) == (5, 8)
    assert (rows[0].kept_side, rows[0].compared, rows[0].f1) == (3, 4, 50.0)
    assert s.rate is not None and s.rate.mean == pytest.approx(62.5)
    assert s.rate.low <= 62.5 <= s.rate.high and s.rate.high - s.rate.low > 10
    # Framed F1 per pair: 1, 0, 0.5, 1 -> 62.5; bare 50; only pair 3 moved.
    assert s.f1 is not None and s.f1.mean == pytest.approx(62.5)
    assert s.f1_vs_bare is not None and s.f1_vs_bare.mean == pytest.approx(12.5)
    assert s.f1_vs_bare.low == pytest.approx(0.0) and s.f1_vs_bare.high > 12.5
    assert "Small sample" in s.note


def test_framed_decisions_equal_to_the_bare_ones_differ_by_exactly_zero() -> None:
    rows = [_row("a", [True, True], [1.0, 0.25]), _row("b", [True, True], [1.0, 0.25])]
    s = suite_summary(rows, [1.0, 0.25])
    assert s.f1_vs_bare is not None
    assert (s.f1_vs_bare.mean, s.f1_vs_bare.low, s.f1_vs_bare.high) == (0.0, 0.0, 0.0)
    assert s.rate is not None and (s.rate.low, s.rate.high) == (100.0, 100.0)


def test_no_compared_pair_and_no_gold_leave_the_intervals_out_not_the_counts() -> None:
    rows = [FramingRow("a", agree=1)]
    s = suite_summary(rows, [])
    assert (s.kept, s.compared, s.agree, s.rate, s.f1, s.f1_vs_bare) == (0, 0, 1, None, None,
                                                                          None)
    lines = invariance_table({"differential": rows}, {"differential": []})
    assert lines[-3].startswith("| all framings | **0/0 (0.0%)**")
    assert "n/a" in lines[-3]


def test_the_table_prints_the_suite_row_with_both_intervals() -> None:
    rows = [_row("a", [True, False], [1.0, 0.0]), _row("b", [True, True], [1.0, 1.0])]
    lines = invariance_table({"differential": rows}, {"differential": [1.0, 1.0]})
    assert "F1 (bare 100.0)" in lines[0]
    total = lines[-3]
    assert total.startswith("| all framings | **3/4 (75.0%)** [")
    assert "75.0; -25.0 [-50.0, +0.0] vs bare" in total
    assert lines[-1].startswith("All framings: per pair") and "n = 2 questions" in lines[-1]
