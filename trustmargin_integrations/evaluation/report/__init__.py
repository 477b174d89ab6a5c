"""The Markdown report of a run directory: the paper's tables, diagnostics and PNG plots.

Everything is recomputed from the run's cache (no model). One module per section, in reading
order: :mod:`.setup` (setup and latency), :mod:`.main_table` (Table 1 with intervals),
:mod:`.question_types`, :mod:`.ablations` (margin ablation and retrieval noise),
:mod:`.arbitration` (source-arbitration diagnostics and disagreement recovery),
:mod:`.hyperparameters` (the lambda x tau heatmap), :mod:`.calibrated` (the fitted rule on
unseen questions) and :mod:`.complementarity` (other pipelines, multi-candidate);
:mod:`.build` puts them together. ``summary.json`` next to the report holds the same numbers.
"""

from trustmargin_integrations.evaluation.report.build import build_report
from trustmargin_integrations.evaluation.report.formatting import inside
from trustmargin_integrations.evaluation.report.main_table import intervals

__all__ = ["build_report", "inside", "intervals"]
