"""`sepo report DIR`: an experiment's results as report.md and a self-contained report.html.

Everything comes from the results table (`results.parquet`), the plan and the cells' results and
training logs (`results`). The report opens with what it lacks (cells of the plan without a result)
and Figure 1: per domain, SEPO − payoff-only GRPO, − the shuffled ablation and − Base, paired by
seed, one panel per quantity in one unit, degenerate policies flagged on their bars (`figures`).
Then each domain's comparisons, tables and figures, the paper's ΔSafety figure, the selection check
and an appendix mapping the readable labels of the tables to cell folders (`sections`). Numbers:
- trained stages at the checkpoint chosen by safety on VALIDATION episodes, measured on TEST
  episodes (held-out selection); the paper's way (best safety on the reported episodes) is kept
  in its own table;
- one seed: the cell's 95% bootstrap interval; several seeds: the mean over seeds with a 95%
  t-interval across seeds, cut to the values the metric can take (`statistics`);
- paired differences per seed, then the same mean and t-interval; with one seed, the two
  bootstrap half-widths added in quadrature.
A row or bar whose cells' replies mostly fail to parse (invalid-action rate above `INVALID_LIMIT`)
is marked † and hatched: it shows the failure rule's fallback, never a trained result.
"""
from __future__ import annotations

from pathlib import Path

from sepo.reports.document import Document, file_stem, fmt
from sepo.reports.figures import (
    figure1,
    figure1_bars,
    figure1_pairs,
    figure_curves,
    figure_delta_safety,
    figure_frontier,
    figure_sweep,
    interval_basis,
)
from sepo.reports.results import (
    DERIVED,
    INVALID_LIMIT,
    PAPER_COLUMNS,
    RIGOROUS_COLUMNS,
    STAGE_LABEL,
    STAGE_ORDER,
    UNPARSED,
    UNPARSED_NOTE,
    Results,
    check_experiment,
    experiment_state,
    inputs_digest,
    paper_numbers,
    report_config,
)
from sepo.reports.sections import (
    appendix,
    delta_safety_section,
    domain_section,
    figure1_section,
    header_section,
    method_section,
    selection_section,
)
from sepo.reports.statistics import metric_range, t_interval

__all__ = [
    "DERIVED",
    "INVALID_LIMIT",
    "PAPER_COLUMNS",
    "RIGOROUS_COLUMNS",
    "STAGE_LABEL",
    "STAGE_ORDER",
    "UNPARSED",
    "UNPARSED_NOTE",
    "Document",
    "Results",
    "build_report",
    "check_experiment",
    "experiment_state",
    "figure1",
    "figure1_bars",
    "figure1_pairs",
    "figure_curves",
    "figure_delta_safety",
    "figure_frontier",
    "figure_sweep",
    "file_stem",
    "fmt",
    "inputs_digest",
    "interval_basis",
    "metric_range",
    "paper_numbers",
    "report_config",
    "t_interval",
    "write_report",
]


def build_report(folder: str | Path, results: Results | None = None) -> Document:
    """The report of the experiment in `folder` (from `results`, where read already)."""
    folder = Path(folder)
    results = results or Results(folder)
    doc = Document(f"Experiment report: {folder.name}")
    header_section(doc, results)
    figure1_section(doc, results)
    method_section(doc, results)
    paper = paper_numbers()
    for domain in results.domains():
        domain_section(doc, results, domain, paper)
    delta_safety_section(doc, results, paper)
    selection_section(doc, results)
    appendix(doc, results)
    return doc


def write_report(experiment: str | Path, run, results: Results | None = None) -> dict:
    """Build the report (from `results`, read already) and write report.md, its images and report.html
    through the run folder `run`. `incomplete`: what the report lacks, one line each (empty when every
    cell of the plan has its result)."""
    results = results or Results(Path(experiment))
    doc = build_report(experiment, results)
    for name, png in doc.images.items():
        run.write_bytes(name, png)
    run.write_text("report.md", "\n".join(doc.md) + "\n")
    run.write_text("report.html", doc.render_html())
    return {"images": len(doc.images), "markdown": str(run.root / "report.md"),
            "html": str(run.root / "report.html"), "incomplete": results.incomplete_lines(),
            "missing": len(results.missing) if results.complete else 0}
