"""PNG figures of the report (matplotlib, headless Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers and CI

import matplotlib.pyplot as plt

from trustmargin_integrations.evaluation.diagnostics import (
    DEFAULT_LAMBDA,
    DEFAULT_TAU,
    NoiseLevel,
    Recovery,
    best_cell,
)
from trustmargin_integrations.files import atomic_binary_output


def heatmap(
    grid: Sequence[Sequence[float]],
    lambdas: Sequence[float],
    taus: Sequence[float],
    out: str | Path,
    *,
    title: str,
    default: tuple[float, float] = (DEFAULT_LAMBDA, DEFAULT_TAU),
) -> Path:
    """Average F1 over (lambda_bind, tau), the default cell boxed purple, the best orange."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    image = ax.imshow(grid, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(taus)), [f"{t:g}" for t in taus])
    ax.set_yticks(range(len(lambdas)), [f"{lam:g}" for lam in lambdas])
    ax.set_xlabel("tau (choose RAG iff M > tau)")
    ax.set_ylabel("lambda_bind")
    span = max(max(r) for r in grid) - min(min(r) for r in grid)
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            bright = value > min(min(r) for r in grid) + 0.6 * span
            ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=7,
                    color="black" if bright else "white")
    best = best_cell(grid, lambdas, taus)

    def box(i: int, j: int, color: str, label: str, inset: float) -> None:
        ax.add_patch(plt.Rectangle((j - 0.5 + inset, i - 0.5 + inset), 1 - 2 * inset,
                                   1 - 2 * inset, fill=False, edgecolor=color, linewidth=2.5,
                                   label=label))

    if default[0] in lambdas and default[1] in taus:
        box(lambdas.index(default[0]), taus.index(default[1]), "purple",
            f"default ({default[0]:g}, {default[1]:g})", 0.02)
    box(best[0], best[1], "orange",
        f"best ({lambdas[best[0]]:g}, {taus[best[1]]:g})", 0.1)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, fontsize=8)
    fig.colorbar(image, ax=ax, label="average F1")
    ax.set_title(title, fontsize=10)
    return _save(fig, out)


def recovery_bars(recovery: Mapping[str, Recovery], out: str | Path, *, title: str) -> Path:
    """Available (gray) vs realized (blue) oracle F1 gain, with realized/available on top."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    names = [("direct_favored", "Direct-favored"), ("rag_favored", "RAG-favored")]
    xs = range(len(names))
    avail = [recovery[k].available for k, _ in names]
    real = [recovery[k].realized for k, _ in names]
    ax.bar([x - 0.18 for x in xs], avail, width=0.36, color="#9e9e9e", label="available (oracle)")
    ax.bar([x + 0.18 for x in xs], real, width=0.36, color="#1f77b4", label="realized (TM)")
    for x, (key, _) in zip(xs, names, strict=True):
        ratio = recovery[key].ratio
        text = "n/a" if ratio is None else f"{100 * ratio:.0f}%"
        top = max(recovery[key].realized, 0.0)
        ax.text(x + 0.18, top, text, ha="center", va="bottom", fontsize=9)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs), [f"{label}\n(n={recovery[k].n_cases})" for k, label in names])
    ax.set_ylabel("F1 gain (points over the dataset)")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, out)


def noise_curves(levels_by_dataset: Mapping[str, Sequence[NoiseLevel]], out: str | Path, *,
                 title: str) -> Path:
    """RAG-selection rate (left) and F1 (right) against the number of passages replaced."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, (name, levels) in enumerate(levels_by_dataset.items()):
        color = colors[n % len(colors)]  # one color per dataset; line style per method
        xs = [lv.n_replaced for lv in levels]
        rates = [lv.rag_selection_rate if lv.rag_selection_rate is not None else float("nan")
                 for lv in levels]
        left.plot(xs, rates, marker="o", color=color, label=name)
        right.plot(xs, [lv.f1_trustmargin for lv in levels], marker="o", color=color,
                   label=f"{name} TrustMargin")
        right.plot(xs, [lv.f1_rag for lv in levels], marker="s", linestyle="--", color=color,
                   label=f"{name} BM25-RAG")
        right.plot(xs, [lv.f1_direct for lv in levels], linestyle=":", color=color,
                   label=f"{name} Direct")
        for ax in (left, right):
            ax.set_xticks(xs)
    left.set_xlabel("passages replaced by random ones")
    left.set_ylabel("RAG selected (% of disagreements)")
    left.set_ylim(0, 100)
    right.set_xlabel("passages replaced by random ones")
    right.set_ylabel("F1")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, out)


def _save(fig: plt.Figure, out: str | Path) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    # Through the one crash-safe writer: a full disk leaves the previous plot intact.
    with atomic_binary_output(path) as fh:
        fig.savefig(fh, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path
