"""The report's sections: each domain's tables and figures, the ablation, the selection check and
the appendix of cells."""
from __future__ import annotations

from sepo.reports.document import Document, file_stem, fmt
from sepo.reports.figures import figure1_pairs, figure_curves, figure_delta_safety, figure_frontier, figure_sweep
from sepo.reports.results import (INVALID_LIMIT, PAPER_COLUMNS, RIGOROUS_COLUMNS, STAGE_LABEL, UNPARSED, UNPARSED_NOTE,
                                  Results)


def domain_section(doc: Document, results: Results, domain: str, paper: dict):
    groups = results.groups(domain)
    value_name = results.exact_name(domain)
    doc.heading(f"{domain}", anchor=f"domain-{domain}")
    unit = next((r.get("utility_unit") for c, r in results.results.items() if results.cells[c]["domain"] == domain), "")
    doc.para(f"Utility unit: {unit}. Safety uses: "
             + (next((r.get("safety_uses") for c, r in results.results.items() if results.cells[c]["domain"] == domain), "") or "?"))
    header = ["agent · stage", *(label for _, label in PAPER_COLUMNS), "cells"]
    rows, titles = [], []
    for (agent, stage, lambdas), cells in groups.items():
        rows.append([results.label(agent, stage, lambdas, cells), *(fmt(results.metric(cells, m)) for m, _ in PAPER_COLUMNS),
                     ", ".join(cells)])
        titles.append("cells: " + ", ".join(cells))
    published = paper["domains"].get(domain)
    if results.protocol == "paper" and published:
        for stage in ("base", "sft", "sepo"):
            values = published["rows"][stage]
            rows.append([f"paper · {STAGE_LABEL[stage]}", *("n/a" if v is None else f"{v:.3f}" for v in values),
                         published.get("source", paper["source"])])
            titles.append("published")
    doc.heading(f"{domain}: the paper's table" if published else f"{domain}: results in the paper's columns", level=3)
    doc.table(header, rows, f"table-{domain}", titles)
    if not published:
        doc.para(f"The paper has no {domain} game: these are its columns applied here so that every domain reads "
                 "alike, with no published numbers to set beside them.")
    if any(results.unparsed(cells) for cells in groups.values()):
        doc.para(UNPARSED_NOTE)
    if results.protocol != "paper" and published:
        doc.para("The paper's published numbers for this domain are shown beside reproduced ones only under the paper "
                 "protocol (its accounting differs from the rigorous one used here).")
    exact = value_name is None or results.all_exact(domain, value_name)
    rig_header = ["agent · stage", f"{value_name or 'exact value'}" + (" (exact)" if exact else ""), "NRA (paper)",
                  *(l for _, l in RIGOROUS_COLUMNS)]
    rig_rows = [[results.label(a, s, lam, cells), fmt(results.metric(cells, value_name)) if value_name else "no solver",
                 fmt(results.metric(cells, "nra")), *(fmt(results.metric(cells, m)) for m, _ in RIGOROUS_COLUMNS)]
                for (a, s, lam), cells in groups.items()]
    doc.heading(f"{domain}: rigorous columns", level=3)
    doc.table(rig_header, rig_rows, f"table-{domain}-rigorous")
    if not exact:
        doc.para(f"Not every {value_name} here is exact: a policy estimated from sampled replies, an agent's memory "
                 "projection, a pruned tree or a lower bound gives another kind of value (each cell's `safety_uses` "
                 "says which; results.parquet's `exact` column marks the exact ones).")
    _ablation(doc, results, domain, groups, value_name)
    for name, figure, caption in (("curves", figure_curves, "training curves (every training cell)"),
                                  ("sweep", figure_sweep, "λ-sweep trade-off (SEPO per λe, payoff-only GRPO at λ=0)"),
                                  ("frontier", figure_frontier, "exact frontier against the train pool, trained tabular policies")):
        png = figure(results, domain)
        if png is not None:
            doc.figure(f"{file_stem(domain)}_{name}.png", png, f"{domain}: {caption}")


def _ablation(doc, results: Results, domain: str, groups: dict, value_name: str | None):
    rows = []
    for (agent, stage, lambdas), cells in groups.items():
        if stage != "sepo":
            continue
        for other_stage, other_lambdas in (("grpo", (0.0, 0.0, 0.0)), ("constant", lambdas), ("aa", (0.0, 0.0, 0.0))):
            other = groups.get((agent, other_stage, other_lambdas))
            if not other:
                continue
            for metric in ("safety", *([value_name] if value_name else [])):
                diff = results.paired(cells, other, metric)
                if diff is not None:
                    mark = f" {UNPARSED}" if results.unparsed(cells) or results.unparsed(other) else ""
                    rows.append([agent + mark, "/".join(f"{v:g}" for v in lambdas), f"SEPO − {STAGE_LABEL[other_stage]}", metric,
                                 fmt(diff), str(diff[3]), ", ".join(diff[4])])
    if rows:
        compared = sorted({row[2].removeprefix("SEPO − ") for row in rows}, key=lambda label: list(STAGE_LABEL.values()).index(label))
        doc.heading(f"{domain}: SEPO vs {', '.join(compared)} (paired by seed)", level=3)
        doc.table(["agent", "λ", "difference", "metric", "mean [95%]", "seeds", "cells"], rows, f"table-{domain}-ablation")


def selection_section(doc: Document, results: Results):
    rows = []
    for cell_id, result in results.results.items():
        chosen = result["selected"]
        if result["cell"]["stage"] in ("base", "sft"):
            continue
        val = results.value[(cell_id, "validation")].get("safety")
        test = results.value[(cell_id, "test")].get("safety")
        rows.append([cell_id, chosen["validation"], fmt(val), chosen["test"], fmt(test)])
    doc.heading("Selection on validation vs on test", anchor="selection")
    doc.para("Held-out selection (shown everywhere above) against the paper's selection on the reported episodes; the "
             "second is optimistic by construction.")
    if rows:
        doc.table(["cell", "chosen on validation", "test safety", "chosen on test (paper)", "test safety"], rows, "table-selection")


def appendix(doc: Document, results: Results):
    doc.heading("Cells", anchor="cells")
    doc.para(f"Each cell's files are in cells/<cell>/ (result.json, audits/, train/); the config is experiment.yaml "
             f"(hash {results.config_hash}); the results table is results.parquet (one row per cell × checkpoint × split × metric).")
    rows = []
    for cell_id, cell in results.cells.items():
        result = results.results.get(cell_id)
        rows.append([cell_id, cell["domain"], cell["agent"], cell["stage"], "-" if cell["seed"] is None else str(cell["seed"]),
                     "-" if not cell["lambdas"] else "/".join(f"{v:g}" for v in cell["lambdas"]),
                     ("missing (its folder or result.json was removed after the experiment finished)" if results.complete
                      else "running or not started") if result is None else result["selected"]["validation"],
                     "" if result is None else f"{result['seconds']:.1f}" + (" (resumed)" if result.get("resumed") else "")])
    doc.table(["cell", "domain", "agent", "stage", "seed", "λ", "checkpoint shown", "seconds, its last start"], rows, "table-cells")
    doc.para("A cell's seconds count from its last start: a language-model cell resumed after a kill (marked resumed "
             "where its result records it) counts only the time since it resumed; its training run's metrics.jsonl "
             "has each step's time.")


def header_section(doc: Document, results: Results):
    """What the experiment was, how its language models were read, and how numbers are selected."""
    plan = results.plan
    doc.para(f"Command: `{plan.get('command', '?')}`; config hash {results.config_hash}; protocol {results.protocol}; "
             f"{len(results.results)} of {len(results.cells)} cells finished.")
    if results.decoding_line():
        doc.para(results.decoding_line())
    doc.para("Selection: trained stages are shown at the checkpoint with the best safety on VALIDATION episodes, measured "
             "on TEST episodes with disjoint seeds (held-out selection). The paper's selection (best safety on the reported "
             "episodes) is kept in the section 'Selection on validation vs on test'. Intervals: 95%; one seed: the cell's "
             "bootstrap interval over episodes (or 'exact'); several seeds: a t-interval over seeds, cut to the metric's "
             "range (a rate's [0, 1], GTBench NRA's [-1, 1], exploitability's [0, ∞)).")
    if plan.get("skipped"):
        doc.para("Not run: " + "; ".join(f"{s['domain']}/{s['agent']}/{s['stage']}: {s['reason']}" for s in plan["skipped"]))


def figure1_section(doc: Document, results: Results, paper: dict):
    delta = figure_delta_safety(results)
    doc.heading("Figure 1: ΔSafety = SEPO − Base", anchor="figure-1")
    unmeasured = sorted({f"{p['domain']} ({p['agent']})" for p in figure1_pairs(results) if p["delta"] is None})
    no_safety = (f"No bar for {', '.join(unmeasured)}: safety was not measured in its Base and SEPO cells (n/a in its "
                 "table), so there is no difference to draw." if unmeasured else "")
    if delta is None:
        doc.para(no_safety or "No domain has both a Base and a SEPO cell finished.")
    else:
        png, bars = delta
        hatched = (f" Hatched grey bars ({UNPARSED}): the SEPO or the Base cell's replies do not parse (invalid-action rate "
                   f"above {INVALID_LIMIT:.0%}); such a bar compares fallback actions, not trained policies."
                   if any(b["unparsed"] for b in bars) else "")
        beyond = sorted({b["domain"] for b in bars} - set(paper["domains"]))
        outside = (f" The paper's Figure 1 has no bar for {', '.join(beyond)}: the same measure, extended."
                   if beyond else "")
        doc.figure("figure1_delta_safety.png", png, "ΔSafety = SEPO − Base per domain and agent (first λ point), paired by "
                   "seed, 95% interval." + hatched + outside + (" " + no_safety if no_safety else ""))
        doc.table(["domain", "agent", "λ", "ΔSafety", "seeds", "cells"],
                  [[b["domain"], b["agent"] + (f" {UNPARSED}" if b["unparsed"] else ""), "/".join(f"{v:g}" for v in b["lambdas"]),
                    fmt(b["delta"]), str(b["delta"][3]), ", ".join(b["cells"])] for b in bars], "table-figure-1")
        if hatched:
            doc.para(UNPARSED_NOTE)
