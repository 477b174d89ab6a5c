"""Margin ablation (each margin removed) and retrieval-noise robustness."""

from __future__ import annotations

from dataclasses import asdict

from trustmargin_integrations.evaluation import plots
from trustmargin_integrations.evaluation.diagnostics import noise_summary
from trustmargin_integrations.evaluation.report.formatting import (
    dataset_label,
    markdown_table,
    number,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section


def margin_section(view: RunView) -> Section:
    """The full rule against the rule without M_prior and without M_bind."""
    rows = []
    scopes = [*[(dataset_label(n), view.tables[n]) for n in view.names],
              ("Average", view.average)]
    for scope, table in scopes:
        full_f1, full_em = table["trustmargin"]
        rows.append([scope, f"{number(full_f1)} / {number(full_em)}",
                     f"{table['no_prior'][0] - full_f1:+.2f} / "
                     f"{table['no_prior'][1] - full_em:+.2f}",
                     f"{table['no_bind'][0] - full_f1:+.2f} / "
                     f"{table['no_bind'][1] - full_em:+.2f}"])
    return Section(["", "## Margin ablation", "",
                    *markdown_table(["", "Full F1 / EM", "delta w/o M_prior",
                                     "delta w/o M_bind"], rows),
                    "", "w/o M_prior decides on `lambda * M_bind > tau`; w/o M_bind on "
                    "`M_prior > tau`; both use the same cached candidates and likelihoods."])


def noise_section(view: RunView) -> Section:
    """F1 and RAG selection as retrieved passages are replaced by random ones (when run)."""
    noisy = {r.name: noise_summary(r.noise) for r in view.runs if r.noise}
    if not noisy:
        return Section([])
    infos = {r.name: r.info.get("noise", {}) for r in view.runs if r.name in noisy}
    figure = plots.noise_curves({dataset_label(n): v for n, v in noisy.items()},
                                view.folder / "noise_curves.png",
                                title=f"Retrieval-noise robustness ({view.models[0]})")
    rows, per_dataset = [], {}
    for n, levels in noisy.items():
        for lv in levels:
            rows.append([dataset_label(n), str(lv.n_replaced), str(lv.n), str(lv.n_disagree),
                         number(lv.rag_selection_rate, 1), number(lv.f1_direct),
                         number(lv.f1_rag), number(lv.f1_trustmargin)])
        per_dataset[n] = {"noise": {"info": infos[n], "levels": [asdict(lv) for lv in levels]}}
    seeds = ", ".join(f"{dataset_label(n)} seed {i.get('seed')}, pool {i.get('pool')}"
                      for n, i in infos.items())
    lines = ["", "## Retrieval-noise robustness", "", f"![noise]({figure.name})", "",
             *markdown_table(["dataset", "replaced", "n", "disagreements", "RAG chosen (%)",
                              "Direct F1", "RAG F1", "TM F1"], rows),
             "", "Replaced passages are drawn at random (seeded: " + seeds
             + ") and put at random positions; the Direct answer is held fixed, the RAG "
             "answer is regenerated and all six likelihoods are rescored."]
    return Section(lines, per_dataset=per_dataset)
