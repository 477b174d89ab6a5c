"""The Markdown report of a run directory: the paper's tables, diagnostics and PNG plots.

Recomputed from the run's cache (no model), one module per section in reading order;
:mod:`.build` puts them together, and ``summary.json`` beside the report holds the numbers.
"""

from trustmargin_integrations.evaluation.report.build import build_report
from trustmargin_integrations.evaluation.report.formatting import inside
from trustmargin_integrations.evaluation.report.main_table import intervals

__all__ = ["build_report", "inside", "intervals"]
