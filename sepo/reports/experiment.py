"""`sepo report DIR`: an experiment's results as report.md and a self-contained report.html.

Everything comes from the results table (`results.parquet`), the plan and the cells' training
logs. Numbers shown:
- trained stages at the checkpoint chosen by safety on VALIDATION episodes, measured on TEST
  episodes (held-out selection); the paper's way (best safety on the reported episodes) is kept
  in its own table;
- one seed: the cell's 95% bootstrap interval; several seeds: the mean over seeds with a 95%
  t-interval across seeds (seed-to-seed variation, which contains the episode noise), cut to the
  values the metric can take (`metric_range`: a rate's [0, 1], exploitability's [0, ∞), ...);
- paired differences (ΔSafety = SEPO − Base, SEPO − payoff-only, SEPO − constant) per seed, then
  the same mean and t-interval; with one seed, the two bootstrap half-widths added in quadrature.
Every row names the cells it comes from; the appendix lists each cell with its folder. A row or bar
whose cells' replies mostly fail to parse (invalid-action rate above `INVALID_LIMIT`) is marked †
and hatched: it shows the failure rule's fallback, never a trained result.
"""
from __future__ import annotations

from pathlib import Path

from sepo.reports.document import Document, file_stem, fmt  # noqa: F401 (the report's public names)
from sepo.reports.figures import (figure1_pairs, figure_curves, figure_delta_safety, figure_frontier,  # noqa: F401
                                  figure_sweep, interval_basis)
from sepo.reports.results import (DERIVED, INVALID_LIMIT, PAPER_COLUMNS, RIGOROUS_COLUMNS, STAGE_LABEL,  # noqa: F401
                                  STAGE_ORDER, UNPARSED, UNPARSED_NOTE, Results, check_experiment, experiment_state,
                                  inputs_digest, paper_numbers, report_config)
from sepo.reports.sections import appendix, domain_section, figure1_section, header_section, selection_section
from sepo.reports.statistics import metric_range, t_interval  # noqa: F401


def build_report(folder: str | Path, results: Results | None = None) -> Document:
    """The report of the experiment in `folder` (from `results`, where read already)."""
    folder = Path(folder)
    results = results or Results(folder)
    doc = Document(f"Experiment report: {folder.name}")
    header_section(doc, results)
    paper = paper_numbers()
    for domain in results.domains():
        domain_section(doc, results, domain, paper)
    figure1_section(doc, results, paper)
    selection_section(doc, results)
    appendix(doc, results)
    return doc


def write_report(experiment: str | Path, run, results: Results | None = None) -> dict:
    """Build the report (from `results`, read already) and write report.md, its images and report.html
    through the run folder `run`."""
    doc = build_report(experiment, results)
    for name, png in doc.images.items():
        run.write_bytes(name, png)
    run.write_text("report.md", "\n".join(doc.md) + "\n")
    run.write_text("report.html", doc.render_html())
    return {"images": len(doc.images), "markdown": str(run.root / "report.md"), "html": str(run.root / "report.html")}
