"""Paired bootstrap confidence intervals over questions.

Every method is averaged over the *same* resampled questions (``numpy.random.default_rng(seed)``):
per method the mean x100 and a percentile interval (95% by default), per difference ``a - b``
its paired interval and the share of resamples above zero. Several datasets are resampled
each within itself and averaged (the paper's "Average"). Below :data:`SMALL_SAMPLE`
questions :meth:`Bootstrap.note` warns that the intervals are approximate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from trustmargin_integrations.errors import InvalidInputError

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
DEFAULT_CONFIDENCE = 0.95
SMALL_SAMPLE = 100
"""Below this many questions the printed output says "small sample"."""
BEST_SINGLE = "best_single"
"""Pseudo-method in a comparison: the better of ``direct`` and ``rag`` by observed mean."""
SINGLE_SOURCES = ("direct", "rag")
# Indices drawn per chunk (resamples x questions), so memory stays bounded for any n.
_CHUNK_DRAWS = 2_000_000
# Differences within this distance of 0 (float noise of equal means) do not count as > 0.
_ZERO = 1e-12


@dataclass(frozen=True)
class Interval:
    """A method's observed mean and its percentile interval (x100)."""

    mean: float
    low: float
    high: float

    def ci(self, digits: int = 2) -> str:
        """The interval as ``[low, high]``."""
        return f"[{self.low:.{digits}f}, {self.high:.{digits}f}]"


@dataclass(frozen=True)
class Difference:
    """``a - b``: observed mean difference (x100), paired interval, share of resamples > 0."""

    a: str
    b: str
    mean: float
    low: float
    high: float
    p_positive: float

    def ci(self, digits: int = 2) -> str:
        """The interval as ``[low, high]`` with signs."""
        return f"[{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


@dataclass(frozen=True)
class Bootstrap:
    """Intervals of several methods (and their differences) over the same questions."""

    n: int
    sizes: dict[str, int]
    resamples: int
    seed: int
    confidence: float
    methods: dict[str, Interval]
    differences: dict[str, Difference]

    @property
    def small_sample(self) -> bool:
        """True when some group has fewer than :data:`SMALL_SAMPLE` questions."""
        return min(self.sizes.values()) < SMALL_SAMPLE

    def note(self) -> str:
        """One line: n, how the intervals were made, and the small-sample warning if due."""
        groups = "" if len(self.sizes) == 1 else (
            " (" + ", ".join(f"{k} {v}" for k, v in self.sizes.items())
            + "; each resampled within itself)")
        line = (f"n = {self.n} questions{groups}; {100 * self.confidence:g}% paired bootstrap "
                f"percentile intervals ({self.resamples:,} resamples, seed {self.seed}).")
        if self.small_sample:
            small = [f"{k} n = {v}" for k, v in self.sizes.items() if v < SMALL_SAMPLE]
            which = f"n < {SMALL_SAMPLE}" if len(self.sizes) == 1 else ", ".join(small)
            line += (f" Small sample ({which}): the intervals are wide and only "
                     "approximate; do not read differences inside them as real.")
        return line

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"n": self.n, "sizes": dict(self.sizes), "resamples": self.resamples,
                "seed": self.seed, "confidence": self.confidence,
                "small_sample": self.small_sample,
                "methods": {k: asdict(v) for k, v in self.methods.items()},
                "differences": {k: asdict(v) for k, v in self.differences.items()}}


def comparison_key(a: str, b: str) -> str:
    """The key of ``a - b`` in :attr:`Bootstrap.differences`."""
    return f"{a} - {b}"


def paired_bootstrap(
    scores: Mapping[str, Sequence[float]],
    comparisons: Sequence[tuple[str, str]] = (),
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Bootstrap:
    """Paired bootstrap of per-question scores (0..1) of several methods on the same questions.

    Args:
        scores: method name -> one score per question, every list in the same question order.
        comparisons: ``(a, b)`` pairs whose difference ``a - b`` is reported; ``b`` may be
            :data:`BEST_SINGLE` (the better of ``direct`` and ``rag`` by observed mean).
        resamples: bootstrap resamples.
        seed: seed of ``numpy.random.default_rng``; the same seed gives the same intervals.
        confidence: coverage of the percentile intervals.
    """
    return grouped_bootstrap({"all": scores}, comparisons, resamples=resamples, seed=seed,
                             confidence=confidence)


def grouped_bootstrap(
    groups: Mapping[str, Mapping[str, Sequence[float]]],
    comparisons: Sequence[tuple[str, str]] = (),
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Bootstrap:
    """:func:`paired_bootstrap` of the mean of per-group means, each group resampled alone.

    Args:
        groups: group (dataset) -> method -> per-question scores; every group has the same
            methods.
    """
    arrays, methods = _validate(groups, resamples, confidence)
    check_seed(seed)
    point = np.mean([a.mean(axis=0) for a in arrays.values()], axis=0)
    resolved = [(_resolve(a, methods, point), _resolve(b, methods, point))
                for a, b in comparisons]
    columns = list(methods) + [f"{a}-{b}" for a, b in resolved]
    rng = np.random.default_rng(seed)
    stats = np.zeros((resamples, len(columns)))
    for values in arrays.values():
        extended = np.column_stack(
            [values] + [values[:, methods.index(a)] - values[:, methods.index(b)]
                        for a, b in resolved])
        stats += _resampled_means(extended, rng, resamples)
    stats /= len(arrays)
    tail = 100 * (1 - confidence) / 2
    lows, highs = np.percentile(stats, [tail, 100 - tail], axis=0)
    out_methods = {m: Interval(100 * float(point[i]), 100 * float(lows[i]),
                               100 * float(highs[i])) for i, m in enumerate(methods)}
    differences = {}
    for j, ((a, b), (orig_a, orig_b)) in enumerate(zip(resolved, comparisons, strict=True)):
        col = len(methods) + j
        observed = float(point[methods.index(a)] - point[methods.index(b)])
        differences[comparison_key(orig_a, orig_b)] = Difference(
            a=a, b=b, mean=100 * observed, low=100 * float(lows[col]),
            high=100 * float(highs[col]), p_positive=float(np.mean(stats[:, col] > _ZERO)))
    sizes = {g: int(a.shape[0]) for g, a in arrays.items()}
    return Bootstrap(n=sum(sizes.values()), sizes=sizes, resamples=resamples, seed=seed,
                     confidence=confidence, methods=out_methods, differences=differences)


# Every resample keeps one mean per method: 10^8 resamples took more than 6 GB. A million
# already puts a 95% interval's ends within about 0.01 F1 points of their limit.
MAX_RESAMPLES = 1_000_000


SEED_MAX = 2**32 - 1
"""The largest seed every generator the checks use takes (numpy's and ``random``'s)."""


def check_seed(seed: int, field: str = "seed") -> int:
    """Refuse a seed outside ``0..SEED_MAX`` (named ``field``): numpy refuses a negative one
    with a bare ValueError, which ``check --seed -1`` raised after the model had loaded."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise InvalidInputError(field, f"must be a whole number in 0..{SEED_MAX:,}, got "
                                f"{seed!r}", "use 0 (the default) or another non-negative "
                                "number")
    return seed


def check_resamples(resamples: int, field: str = "resamples") -> None:
    """Refuse a resample count outside ``1..MAX_RESAMPLES`` (named ``field``)."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or not (
            1 <= resamples <= MAX_RESAMPLES):
        raise InvalidInputError(field, f"must be an integer in 1..{MAX_RESAMPLES:,}, got "
                                f"{resamples!r}", "use 10000 (the default)")


def _validate(groups: Mapping[str, Mapping[str, Sequence[float]]], resamples: int,
              confidence: float) -> tuple[dict[str, np.ndarray], list[str]]:
    check_resamples(resamples)
    if not 0 < confidence < 1:
        raise InvalidInputError("confidence", f"must be in (0, 1), got {confidence}",
                                "use 0.95 (the default)")
    if not groups:
        raise InvalidInputError("scores", "holds no group", "pass at least one dataset")
    methods: list[str] | None = None
    arrays = {}
    for name, scores in groups.items():
        if methods is None:
            methods = list(scores)
        if not methods or list(scores) != methods:
            raise InvalidInputError(f"scores[{name!r}]", "must hold the same methods, in the "
                                    "same order, as every other group", "score every method")
        lengths = {len(v) for v in scores.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise InvalidInputError(f"scores[{name!r}]", "needs one score per question for "
                                    "every method, at least one question",
                                    "score all methods on the same questions")
        values = np.asarray([list(v) for v in scores.values()], dtype=float).T
        if not np.isfinite(values).all():
            raise InvalidInputError(f"scores[{name!r}]", "holds a non-finite score",
                                    "pass per-question scores in 0..1")
        arrays[name] = values
    assert methods is not None
    return arrays, methods


def _resolve(name: str, methods: Sequence[str], point: np.ndarray) -> str:
    if name != BEST_SINGLE:
        if name not in methods:
            raise InvalidInputError("comparisons", f"names unknown method {name!r}",
                                    f"compare methods among {list(methods)}")
        return name
    if not all(s in methods for s in SINGLE_SOURCES):
        raise InvalidInputError("comparisons", f"{BEST_SINGLE!r} needs both 'direct' and 'rag'",
                                "score both single sources")
    direct, rag = (point[methods.index(s)] for s in SINGLE_SOURCES)
    return "rag" if rag > direct else "direct"


def _resampled_means(values: np.ndarray, rng: np.random.Generator, resamples: int
                     ) -> np.ndarray:
    """Column means of ``values`` (questions x columns) over ``resamples`` paired resamples.

    The drawn indices depend only on the rng, the number of questions and of resamples (not on
    the columns), so adding a comparison never changes another column's interval.
    """
    n = values.shape[0]
    out = np.empty((resamples, values.shape[1]))
    columns = [np.ascontiguousarray(values[:, col]) for col in range(values.shape[1])]
    chunk = max(1, _CHUNK_DRAWS // n)
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        for col, column in enumerate(columns):
            out[start:stop, col] = column[idx].mean(axis=1)
    return out


def source_comparisons(method: str = "trustmargin") -> list[tuple[str, str]]:
    """``method`` against the best single source, Direct and RAG (the issue's comparisons)."""
    return [(method, BEST_SINGLE), (method, "direct"), (method, "rag")]
