"""Hyper-parameter robustness: the lambda x tau grid replayed from cached likelihoods, drawn
as a heatmap."""

from __future__ import annotations

from trustmargin_integrations.evaluation import plots
from trustmargin_integrations.evaluation.diagnostics import (
    DEFAULT_LAMBDA,
    DEFAULT_TAU,
    GRID_LAMBDAS,
    GRID_TAUS,
    best_cell,
    hyperparameter_grid,
)
from trustmargin_integrations.evaluation.report.formatting import dataset_label
from trustmargin_integrations.evaluation.report.view import RunView, Section


def section(view: RunView) -> Section:
    """The heatmap, the default cell against the best one, and both single sources."""
    grid = hyperparameter_grid(view.scored, GRID_LAMBDAS, GRID_TAUS)
    figure = plots.heatmap(grid, GRID_LAMBDAS, GRID_TAUS, view.folder / "hparam_heatmap.png",
                           title=f"Average F1 over {', '.join(map(dataset_label, view.names))} "
                                 f"({view.models[0]})")
    best = best_cell(grid, GRID_LAMBDAS, GRID_TAUS)
    default = grid[GRID_LAMBDAS.index(DEFAULT_LAMBDA)][GRID_TAUS.index(DEFAULT_TAU)]
    average = view.average
    lines = ["", "## Hyper-parameter robustness (replayed from cached likelihoods)", "",
             f"![heatmap]({figure.name})", "",
             f"Default cell (lambda {DEFAULT_LAMBDA}, tau {DEFAULT_TAU}): average F1 "
             f"{default:.2f}. Best cell (lambda {GRID_LAMBDAS[best[0]]:g}, tau "
             f"{GRID_TAUS[best[1]]:g}): {grid[best[0]][best[1]]:.2f}. Always-Direct: "
             f"{average['direct'][0]:.2f}, always-RAG: {average['rag'][0]:.2f}. Picking the "
             "best cell on the evaluation questions themselves is optimistic; the default is "
             "the honest number (ties: the cell nearest the default is shown)."]
    return Section(lines, {"grid": {"lambdas": list(GRID_LAMBDAS), "taus": list(GRID_TAUS),
                                    "avg_f1": grid}})
