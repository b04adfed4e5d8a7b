"""The report's sections, in reading order: what is missing, Figure 1, how the numbers were made, each
domain (its comparisons, the paper's table, the rigorous columns, its figures), the paper's ΔSafety
figure, the selection check and the appendix that maps readable labels to cell folders."""
from __future__ import annotations

from sepo.reports.document import Document, file_stem, fmt
from sepo.reports.figures import (
    COMPARED,
    MARK_MEANING,
    MARKS,
    compared_group,
    figure1,
    figure1_pairs,
    figure_curves,
    figure_delta_safety,
    figure_frontier,
    figure_sweep,
    interval_basis,
)
from sepo.reports.results import (
    INVALID_LIMIT,
    PAPER_COLUMNS,
    RIGOROUS_COLUMNS,
    STAGE_LABEL,
    UNPARSED,
    UNPARSED_NOTE,
    Results,
    lambda_text,
)

CANCELS = ("a penalty that is the same for every rollout of a group cancels in GRPO's group-relative "
           "advantage (each reward minus its group's mean, divided by its group's spread), so the update is "
           "payoff-only GRPO's step for step, and the ablation tests nothing about per-rollout credit")
SHUFFLED = ("keeps the penalties' spread without crediting each rollout's own actions, and is the ablation "
            "that can tell")
COMPARISONS = ("grpo", "shuffled", "base", "constant", "aa")
"""What SEPO is set against in a domain's comparisons, in this order."""


def _and(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _seeds_text(results: Results, cells: list[str]) -> str:
    seeds = results.seeds(cells)
    return "no seed" if seeds == "-" else f"seed {seeds}" if len(cells) == 1 else f"seeds {seeds}"


def _flag_text(found: dict) -> str:
    """A comparison's flags (`Results.compare`) as a table cell."""
    words = {"deterministic": " and ".join(found["deterministic"]) + " deterministic",
             "unparsed": f"replies unparsed {UNPARSED}", "zero-width": "zero-width interval"}
    return "; ".join(words[f] for f in found["flags"]) or "-"


def header_section(doc: Document, results: Results):
    """What the experiment was, and, first of all, what the report lacks."""
    if results.missing and results.complete:
        doc.warning(f"Incomplete report: {len(results.missing)} of {len(results.cells)} cells listed in the "
                    f"plan have no result.json ({results.missing_reason()}); they are left out of every "
                    "table and figure and listed as missing in the appendix.")
    elif results.missing:
        doc.warning(f"Partial report: the experiment has not finished ({len(results.results)} of "
                    f"{len(results.cells)} cells have a result); the next `sepo report` rebuilds it.")
    doc.para(f"Command: `{results.plan.get('command', '?')}`; config hash {results.config_hash}; protocol "
             f"{results.protocol}; {len(results.results)} of {len(results.cells)} cells finished.")
    for amendment in results.amendments:
        doc.para(f"The config was amended ({amendment.get('time', '?')}, `--amend`): "
                 f"{amendment.get('changes', '?')} (config hash {amendment.get('from', '?')} to "
                 f"{amendment.get('to', '?')}); {len(amendment.get('kept', []))} finished cells were kept, "
                 "their definitions unchanged, and the unfinished ones started over (`amendments.json`).")


def method_section(doc: Document, results: Results):
    """How the numbers were made: decoding, selection, intervals, what did not run."""
    doc.heading("How the numbers were made", anchor="method")
    if results.decoding_line():
        doc.para(results.decoding_line())
    doc.para("Selection: trained stages are shown at the checkpoint with the best safety on VALIDATION "
             "episodes, measured on TEST episodes with disjoint seeds (held-out selection). The paper's "
             "selection (best safety on the reported episodes) is kept in the section 'Selection on "
             "validation vs on test'. Intervals: 95%; one seed: the cell's bootstrap interval over episodes "
             "(or 'exact'); several seeds: a t-interval over seeds, cut to the metric's range (a rate's [0, "
             "1], GTBench NRA's [-1, 1], exploitability's [0, ∞)). Differences between methods are paired by "
             "seed (each seed of one method meets the same seed of the other; Base, which has no seed, meets "
             "every seed).")
    skipped = results.plan.get("skipped")
    if skipped:
        doc.para("Not run: " + "; ".join(f"{s['domain']}/{s['agent']}/{s['stage']}: {s['reason']}"
                                         for s in skipped))


# ------------------------------------------------------------------------------------ Figure 1

def figure1_section(doc: Document, results: Results):
    """Figure 1, first in the report: SEPO against payoff-only GRPO, the shuffled ablation and Base."""
    drawn = figure1(results)
    present = [STAGE_LABEL[s] for s in COMPARED if drawn and any(b["stage"] == s for b in drawn[1])]
    doc.heading("Figure 1: SEPO − " + (", − ".join(present) if present else "payoff-only GRPO and Base"),
                anchor="figure-1")
    if drawn is None:
        doc.para("No domain has a SEPO cell and a payoff-only GRPO, shuffled or Base cell finished with a "
                 "measured number to set it against.")
        return
    png, bars = drawn
    domains = list(dict.fromkeys(b["domain"] for b in bars))
    lambdas = "; ".join(f"{d} {lambda_text(next(b['lambdas'] for b in bars if b['domain'] == d))}"
                        for d in domains)
    units = "; ".join(f"{d}: {results.unit(d)}" for d in domains)
    sweep = any(len({lam for (_, s, lam) in results.groups(d) if s == "sepo"}) > 1 for d in domains)
    marks = " ".join(f"{MARKS[f]}: {MARK_MEANING[f]}." for f in MARKS if any(f in b["flags"] for b in bars))
    caption = (f"SEPO − {', − '.join(present)}, per domain. Each bar is the mean over seeds of SEPO's number "
               "minus the other method's at the same seed (Base has no seed: every SEPO seed meets its one "
               f"audit); whiskers: 95% interval {interval_basis(bars)}. Test episodes; each trained cell at "
               "its checkpoint chosen on validation episodes. One panel per quantity, each in one unit: the "
               f"exact value and utility in the domain's payoff unit ({units}), collusion and externality as "
               f"rates. SEPO trained at λ = λe/λc/λx: {lambdas}"
               + (" (the first point of each domain's sweep; every point is in its domain's comparisons)"
                  if sweep else "")
               + ("; the shuffled ablation at the same λ" if any(b["stage"] == "shuffled" for b in bars)
                  else "")
               + "; payoff-only GRPO trains on payoff alone."
               + (f" Hatched, marked bars: {marks}" if marks else ""))
    doc.figure("figure1.png", png, caption,
               alt="Figure 1: SEPO minus each other method, per domain and quantity")
    doc.table(["domain", "agent", "quantity", "SEPO −", "difference [95%]", "seeds", "flags"],
              [[b["domain"], b["agent"], b["label"], STAGE_LABEL[b["stage"]], fmt(b["delta"]), b["seeds"],
                _flag_text(b)] for b in bars], "table-figure-1")
    flagged = _deterministic_policies(results, bars)
    if flagged:
        doc.para("Deterministic policies (every action rate on test episodes 0 or 1): a difference against "
                 "one moves only with the opponents' play, so its interval over seeds can have no width.")
        doc.bullets(flagged)
    if any("unparsed" in b["flags"] for b in bars):
        doc.para(UNPARSED_NOTE)
    equal = [d for d in domains if _constant_equals_grpo(results, d)[0]]
    if equal:
        doc.para(f"The constant ablation is not drawn: in {_and(equal)} it gave payoff-only GRPO's numbers "
                 f"exactly at every seed; {CANCELS}.")


def _deterministic_policies(results: Results, bars: list[dict]) -> list[str]:
    """One line per deterministic policy Figure 1 compares: what it does, from its action rates."""
    lines = []
    for domain in dict.fromkeys(b["domain"] for b in bars):
        for (agent, stage, lambdas), cells in results.groups(domain).items():
            drawn = [b for b in bars if b["domain"] == domain and b["agent"] == agent]
            shown = any(b["stage"] == stage or (stage == "sepo" and b["lambdas"] == lambdas) for b in drawn)
            if shown and results.deterministic(cells):
                label = results.label(agent, stage, lambdas, cells)
                lines.append(f"{domain} · {label}: {results.describe(cells)}")
    return lines


# ------------------------------------------------------------------------------------ domains

def domain_section(doc: Document, results: Results, domain: str, paper: dict):
    """A domain: its comparisons, the paper's table, the rigorous columns and its figures."""
    groups = results.groups(domain)
    value_name = results.exact_name(domain)
    doc.heading(f"{domain}", anchor=f"domain-{domain}")
    uses = next((r.get("safety_uses") for c, r in results.results.items()
                 if results.cells[c]["domain"] == domain), "")
    lambdas = results.safety_lambdas(domain)
    doc.para(f"Utility unit: {results.unit(domain)}. Safety uses: {uses or '?'}"
             + (f"; safety at λ = λe/λc/λx = {lambda_text(lambdas)}." if lambdas else "."))
    comparisons_section(doc, results, domain, groups, value_name)
    _paper_table(doc, results, domain, groups, paper)
    _rigorous_table(doc, results, domain, groups, value_name)
    for name, figure, caption in (
            ("curves", figure_curves, "training curves (every training cell)"),
            ("sweep", figure_sweep, "λ-sweep trade-off (SEPO per λe, payoff-only GRPO at λ=0)"),
            ("frontier", figure_frontier, "exact frontier against the train pool; each cell at its shown "
                                          "checkpoint's test audit: exact for a table, with its intervals "
                                          "where estimated from sampled replies")):
        png = figure(results, domain)
        if png is not None:
            doc.figure(f"{file_stem(domain)}_{name}.png", png, f"{domain}: {caption}")


def comparisons_section(doc: Document, results: Results, domain: str, groups: dict, value_name: str | None):
    """SEPO against payoff-only GRPO, the shuffled ablation, Base, the constant ablation and Advantage
    Alignment (those that ran), paired by seed; what each policy does; where the constant ablation
    equals payoff-only GRPO, and why."""
    metrics = [value_name or "exploit_pool", "collusion", "externality", "utility", "safety"]
    rows, compared = [], []
    for (agent, stage, lambdas), cells in groups.items():
        for other_stage in COMPARISONS if stage == "sepo" else ():
            other = compared_group(groups, agent, other_stage, lambdas)
            for metric in metrics if other else ():
                found = results.compare(cells, other, STAGE_LABEL[other_stage], metric)
                if found is not None:
                    compared.append(other_stage)
                    rows.append([agent, lambda_text(lambdas), f"SEPO − {STAGE_LABEL[other_stage]}", metric,
                                 fmt(found["delta"]), found["seeds"], _flag_text(found)])
    descriptions = [f"{results.label(a, s, lam, cells)} ({_seeds_text(results, cells)}): {text}"
                    + (" — deterministic: one action in each situation it met" if results.deterministic(cells)
                       else "")
                    for (a, s, lam), cells in groups.items() if (text := results.describe(cells))]
    if not rows and not descriptions:
        return
    names = [STAGE_LABEL[s] for s in dict.fromkeys(compared)]
    doc.heading(f"{domain}: SEPO vs {', '.join(names)} (paired by seed)" if names
                else f"{domain}: what each policy does", level=3)
    if descriptions:
        doc.para("What each policy does (its action rates on test episodes, mean over seeds):")
        doc.bullets(descriptions)
    if rows:
        doc.table(["agent", "λ", "difference", "metric", "mean [95%]", "seeds", "flags"], rows,
                  f"table-{domain}-ablation")
    equal, pairs = _constant_equals_grpo(results, domain)
    ran_shuffled = any(s == "shuffled" for (_, s, _) in groups)
    if pairs and equal:
        doc.para(f"The constant ablation gave exactly payoff-only GRPO's numbers in each of its {pairs} "
                 f"cells (each set against payoff-only GRPO at the same seed): {CANCELS}. The shuffled "
                 "ablation "
                 + ("(each group's per-rollout charges permuted among its rollouts) " if ran_shuffled else
                    "(the `shuffled` stage, not run here: each group's per-rollout charges permuted among "
                    "its rollouts) ") + SHUFFLED + ".")
    elif pairs:
        doc.para("The constant ablation differs from payoff-only GRPO at some seed: a group-constant penalty "
                 "cancels only where each reward is centred and scaled within its own group, so the "
                 "difference comes from scaling across groups (e.g. by the batch's spread) or from training "
                 "that is not deterministic.")


def _constant_equals_grpo(results: Results, domain: str) -> tuple[bool, int]:
    """(whether every constant-ablation cell gave the numbers of the payoff-only GRPO cell of its seed,
    how many such pairs there are)."""
    groups = results.groups(domain)
    pairs = []
    for (agent, stage, _), cells in groups.items():
        if stage != "constant":
            continue
        grpo = {results.cells[c]["seed"]: c for c in compared_group(groups, agent, "grpo", None) or []}
        pairs += [(c, grpo[results.cells[c]["seed"]]) for c in cells if results.cells[c]["seed"] in grpo]
    return bool(pairs) and all(results.same_numbers(a, b) for a, b in pairs), len(pairs)


def _paper_table(doc: Document, results: Results, domain: str, groups: dict, paper: dict):
    header = ["agent · stage", "seeds", *(label for _, label in PAPER_COLUMNS)]
    rows, titles = [], []
    for (agent, stage, lambdas), cells in groups.items():
        rows.append([results.label(agent, stage, lambdas, cells), results.seeds(cells),
                     *(fmt(results.metric(cells, m)) for m, _ in PAPER_COLUMNS)])
        titles.append("cells: " + ", ".join(cells))
    published = paper["domains"].get(domain)
    if results.protocol == "paper" and published:
        for stage in ("base", "sft", "sepo"):
            values = published["rows"][stage]
            rows.append([f"paper · {STAGE_LABEL[stage]}", "published",
                         *("n/a" if v is None else f"{v:.3f}" for v in values)])
            titles.append("published")
    doc.heading(f"{domain}: the paper's table" if published else f"{domain}: results in the paper's columns",
                level=3)
    doc.table(header, rows, f"table-{domain}", titles)
    if results.protocol == "paper" and published:
        doc.para(f"Rows 'paper · ...': the published numbers ({published.get('source', paper['source'])}).")
    if not published:
        doc.para(f"The paper has no {domain} game: these are its columns applied here so that every domain "
                 "reads alike, with no published numbers to set beside them.")
    if any(results.unparsed(cells) for cells in groups.values()):
        doc.para(UNPARSED_NOTE)
    if results.protocol != "paper" and published:
        doc.para("The paper's published numbers for this domain are shown beside reproduced ones only under "
                 "the paper protocol (its accounting differs from the rigorous one used here).")


def _rigorous_table(doc: Document, results: Results, domain: str, groups: dict, value_name: str | None):
    exact = value_name is None or results.all_exact(domain, value_name)
    value = (value_name or "exact value") + (" (exact)" if exact else "")
    header = ["agent · stage", value, "NRA (paper)", *(label for _, label in RIGOROUS_COLUMNS)]
    rows = [[results.label(a, s, lam, cells),
             fmt(results.metric(cells, value_name)) if value_name else "no solver",
             fmt(results.metric(cells, "nra")), *(fmt(results.metric(cells, m)) for m, _ in RIGOROUS_COLUMNS)]
            for (a, s, lam), cells in groups.items()]
    doc.heading(f"{domain}: rigorous columns", level=3)
    doc.table(header, rows, f"table-{domain}-rigorous")
    if not exact:
        doc.para(f"Not every {value_name} here is exact: a policy estimated from sampled replies, an agent's "
                 "memory projection, a pruned tree or a lower bound gives another kind of value (each cell's "
                 "`safety_uses` says which; results.parquet's `exact` column marks the exact ones).")


# ------------------------------------------------------------------------------------ the rest

def delta_safety_section(doc: Document, results: Results, paper: dict):
    """The paper's Figure 1, reproduced: ΔSafety = SEPO − Base, at each domain's safety λ."""
    delta = figure_delta_safety(results)
    doc.heading("The paper's Figure 1: ΔSafety = SEPO − Base", anchor="delta-safety")
    unmeasured = sorted({f"{p['domain']} ({p['agent']})" for p in figure1_pairs(results)
                         if p["delta"] is None})
    no_safety = (f"No bar for {', '.join(unmeasured)}: safety was not measured in its Base and SEPO cells "
                 "(n/a in its table), so there is no difference to draw." if unmeasured else "")
    if delta is None:
        doc.para(no_safety or "No domain has both a Base and a SEPO cell finished.")
        return
    png, bars = delta
    hatched = (f" Hatched grey bars ({UNPARSED}): the SEPO or the Base cell's replies do not parse "
               f"(invalid-action rate above {INVALID_LIMIT:.0%}); such a bar compares fallback actions, not "
               "trained policies." if any(b["unparsed"] for b in bars) else "")
    hatched += "".join(f" {MARKS[f]}: {MARK_MEANING[f]}." for f in ("deterministic", "zero-width")
                       if any(f in b["flags"] for b in bars))
    beyond = sorted({b["domain"] for b in bars} - set(paper["domains"]))
    outside = (f" The paper's Figure 1 has no bar for {', '.join(beyond)}: the same measure, extended."
               if beyond else "")
    at = "; ".join(f"{d} {lambda_text(lam)}" for d in dict.fromkeys(b["domain"] for b in bars)
                   if (lam := results.safety_lambdas(d)))
    scale = f" (safety λe/λc/λx: {at})" if at else ""
    doc.figure("figure_delta_safety.png", png,
               "ΔSafety = SEPO − Base per domain and agent (first λ point), paired by seed, 95% interval. "
               "Safety mixes payoff and penalties at each domain's own λ, so bars of different domains are "
               f"not on one scale{scale}; Figure 1 shows the quantities one by one."
               + hatched + outside + (" " + no_safety if no_safety else ""))
    doc.table(["domain", "agent", "SEPO λ", "ΔSafety", "seeds", "flags"],
              [[b["domain"], b["agent"] + (f" {UNPARSED}" if b["unparsed"] else ""),
                lambda_text(b["lambdas"]), fmt(b["delta"]), b["seeds"], _flag_text(b)] for b in bars],
              "table-delta-safety")
    if any(b["unparsed"] for b in bars):
        doc.para(UNPARSED_NOTE)


def selection_section(doc: Document, results: Results):
    """Each trained cell's checkpoint chosen on validation episodes against the one the paper's way chose."""
    rows = []
    for cell_id, result in results.results.items():
        chosen = result["selected"]
        if result["cell"]["stage"] in ("base", "sft"):
            continue
        val = results.value[(cell_id, "validation")].get("safety")
        test = results.value[(cell_id, "test")].get("safety")
        rows.append([results.cell_label(cell_id), chosen["validation"], fmt(val), chosen["test"], fmt(test)])
    doc.heading("Selection on validation vs on test", anchor="selection")
    doc.para("Held-out selection (shown everywhere above) against the paper's selection on the reported "
             "episodes; the second is optimistic by construction.")
    if rows:
        doc.table(["cell", "chosen on validation", "test safety", "chosen on test (paper)", "test safety"],
                  rows, "table-selection")


def appendix(doc: Document, results: Results):
    """Every cell of the plan: its folder, its readable label, its shown checkpoint (or why it has none)."""
    doc.heading("Appendix: cells", anchor="cells")
    doc.para("Each cell's files are in cells/<cell>/ (result.json, audits/, train/); the config is "
             f"experiment.yaml (hash {results.config_hash}); the results table is results.parquet (one row "
             "per cell × checkpoint × split × metric).")
    rows = []
    for cell_id in results.cells:
        result = results.results.get(cell_id)
        if result is None:
            state = ("missing (its folder or result.json was removed after the experiment finished)"
                     if results.complete else "running or not started")
            seconds = ""
        else:
            state = result["selected"]["validation"]
            seconds = f"{result['seconds']:.1f}" + (" (resumed)" if result.get("resumed") else "")
        rows.append([cell_id, results.cell_label(cell_id), state, seconds])
    doc.table(["cell", "what it is", "checkpoint shown", "seconds, its last start"], rows, "table-cells")
    doc.para("A cell's seconds count from its last start: a language-model cell resumed after a kill (marked "
             "resumed where its result records it) counts only the time since it resumed; its training run's "
             "metrics.jsonl has each step's time.")
