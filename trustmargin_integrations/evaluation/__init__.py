"""Evaluation harness: datasets, metrics, a resumable runner, diagnostics, plots and reports.

Typical use is the CLI (``trustmargin eval`` then ``trustmargin report RUN_DIR``); the same
pieces are importable: :func:`~.datasets.load_dataset`, :func:`~.runner.run_eval`,
:class:`~.store.ResultStore`, :mod:`~.diagnostics` and :func:`~.report.build_report`.
"""

from trustmargin_integrations.evaluation.datasets import EvalExample, load_dataset
from trustmargin_integrations.evaluation.metrics import exact_match, token_f1
from trustmargin_integrations.evaluation.runner import (
    EvalRecord,
    PrecomputedPassages,
    RetrieverPassages,
    run_eval,
    run_noise,
)
from trustmargin_integrations.store import ResultStore, cache_key

__all__ = [
    "EvalExample",
    "EvalRecord",
    "PrecomputedPassages",
    "ResultStore",
    "RetrieverPassages",
    "cache_key",
    "exact_match",
    "load_dataset",
    "run_eval",
    "run_noise",
    "token_f1",
]
