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

import base64
import html
import io
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from sepo.errors import SepoError

PAPER_COLUMNS = (("utility", "Pay/r"), ("exploit_pool", "Exploit"), ("robustness", "Robust"), ("externality", "Ext"),
                 ("safety", "Safety"), ("nra", "NRA"))
RIGOROUS_COLUMNS = (("nra_gtbench", "NRA (GTBench)"), ("invalid_action_rate", "invalid rate"))
STAGE_LABEL = {"base": "Base", "sft": "SFT", "grpo": "payoff-only GRPO", "sepo": "SEPO", "constant": "constant ablation",
               "aa": "Advantage Alignment"}
STAGE_ORDER = ("base", "sft", "sepo", "grpo", "constant", "aa")
INVALID_LIMIT = 0.5
"""A cell whose replies fail to parse more often than this (invalid-action rate on test episodes, at the
shown checkpoint) is marked in every table and hatched in Figure 1: its numbers are mostly those of the
failure rule's fallback action, not of a policy the agent plays (or was trained to play)."""
UNPARSED = "†"
UNPARSED_NOTE = (f"{UNPARSED} replies that do not parse: the invalid-action rate exceeds {INVALID_LIMIT:.0%} in at least one "
                 "of the row's cells, so its numbers mostly describe the failure rule's fallback action, not a trained or "
                 "chosen policy; read them as a failure to produce parseable replies, not as a result.")


def paper_numbers() -> dict:
    """The paper's published table (paper-protocol.md §5), as data."""
    import yaml

    return yaml.safe_load((Path(__file__).parent / "paper_results.yaml").read_text())


# ------------------------------------------------------------------------------------ numbers

def metric_range(name: str) -> tuple[float, float]:
    """The values a metric can take by its definition, in every domain: the invalid-action rate and
    a domain's behaviour rates ("<domain>/..._rate...") lie in [0, 1], GTBench's NRA
    (A − O)/(|A| + |O|) in [-1, 1], and exploitability (NashConv) is never negative. A t-interval
    over seeds is symmetric and can leave that range (an invalid rate of 0.010 [-0.007, 0.027]);
    the truth cannot, so the interval is cut to it. Collusion and externality are not cut: a share
    of rounds in some domains, a surplus loss in others."""
    if name == "invalid_action_rate" or ("/" in name and re.search(r"(^|[/_])rate($|_)", name)):
        return 0.0, 1.0
    if name == "nra_gtbench":
        return -1.0, 1.0
    if name in ("exploitability", "nash_conv"):
        return 0.0, math.inf
    return -math.inf, math.inf


def t_interval(values: list[float]) -> tuple[float, float, float]:
    from scipy import stats

    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


class Results:
    """The results table indexed for the report: rows at the shown checkpoint of each cell."""

    def __init__(self, folder: Path):
        from sepo.experiments.execute import RESULT, read_result
        from sepo.experiments.runner import read_results
        from sepo.runs import read_manifest
        from sepo.training.checkpoint import read_json

        self.folder = folder
        self.rows = read_results(folder).to_pylist()
        self.plan = read_json(folder / "plan.json", "experiment plan")
        self.cells = {c["id"]: c for c in self.plan["cells"]}
        manifest = read_manifest(folder) or {}
        self.config = manifest.get("config") or {}
        """The experiment's config as its run folder records it."""
        self.complete = bool(manifest.get("complete"))
        """Whether the experiment finished: a cell without a result is then missing, not still to run."""
        self.results = {}
        for cell_id in self.cells:
            path = folder / "cells" / cell_id / RESULT
            if path.exists():
                self.results[cell_id] = read_result(path)
        self.value = defaultdict(dict)  # (cell, selection) -> metric -> (value, low, high, exact)
        for row in self.rows:
            if row["split"] != "test":
                continue
            for selection in ("validation", "test"):
                if row[f"chosen_by_{selection}"]:
                    numbers = tuple(float("nan") if row[k] is None else row[k] for k in ("value", "low", "high"))
                    self.value[(row["cell"], selection)][row["metric"]] = (*numbers, row["exact"])
        self.config_hash = self.rows[0]["config_hash"] if self.rows else self.plan.get("config_hash")
        self.protocol = self.rows[0]["protocol"] if self.rows else "?"

    def decoding_line(self) -> str | None:
        """How the language-model agents were read (the protocol's decoding with the config's settings
        in its place), or None when the experiment has none: the numbers hold under this decoding only."""
        from sepo.policies.replies import decoding_for

        if not any(agent.get("kind") in ("hf", "openai") for agent in self.config.get("agents", [])):
            return None
        given = self.config.get("decoding", {})
        d = decoding_for(self.config.get("protocol", "rigorous"), **{name: given.get(name) for name in (
            "temperature", "max_new_tokens", "top_p", "top_k", "repetition_penalty")})
        filters = ", ".join(f"{name} {value:g}" for name, value, off in (("top-p", d.top_p, 1.0), ("top-k", d.top_k, 0),
                            ("repetition penalty", d.repetition_penalty, 1.0)) if value != off)
        if d.greedy:
            return (f"Language-model agents were read greedily (temperature 0, one reply per state, read exactly), "
                    f"up to {d.max_new_tokens} new tokens a reply; their numbers hold under this decoding.")
        samples = given.get("samples")
        return (f"Language-model agents were read at temperature {d.temperature:g}" + (f", {filters}" if filters else "")
                + f", up to {d.max_new_tokens} new tokens a reply" + (f", {samples} sampled replies per state where the "
                "policy is not read exactly" if samples else "") + "; their numbers hold under this decoding.")

    def domains(self) -> list[str]:
        return list(dict.fromkeys(c["domain"] for c in self.cells.values()))

    def groups(self, domain: str) -> dict:
        """(agent, stage, λ) -> [cell ids over seeds] of finished cells, in plan order."""
        out = defaultdict(list)
        for cell_id, cell in self.cells.items():
            if cell["domain"] == domain and cell_id in self.results:
                out[(cell["agent"], cell["stage"], tuple(cell["lambdas"]) if cell["lambdas"] else None)].append(cell_id)
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0], STAGE_ORDER.index(kv[0][1]), kv[0][2] or ())))

    def metric(self, cell_ids: list[str], name: str, selection: str = "validation"):
        """(value, low, high, how) over the cells (seeds) of a group."""
        found = [self.value[(c, selection)].get(name) for c in cell_ids]
        found = [f for f in found if f is not None and not math.isnan(f[0])]
        if not found:
            return None
        if len(found) == 1:
            value, low, high, exact = found[0]
            return value, low, high, "exact" if exact else "bootstrap"
        mean, low, high = t_interval([f[0] for f in found])
        least, most = metric_range(name)
        return mean, max(low, least), min(high, most), f"{len(found)} seeds"

    def paired(self, cells_a: list[str], cells_b: list[str], name: str):
        """(mean, low, high, pairs, cells) of metric(a) − metric(b), paired by seed: a cell of `a` meets
        the cell of `b` with its seed, or `b`'s one unseeded cell (a base); `cells` are those that met."""
        by_seed_b = {self.cells[c]["seed"]: c for c in cells_b}
        unseeded = by_seed_b.get(None)
        diffs, halves, used = [], [], []
        for cell in cells_a:
            other = by_seed_b.get(self.cells[cell]["seed"], unseeded)
            a, b = self.value[(cell, "validation")].get(name), self.value[(other, "validation")].get(name) if other else None
            if a is None or b is None or math.isnan(a[0]) or math.isnan(b[0]):
                continue
            diffs.append(a[0] - b[0])
            halves.append(math.hypot((a[2] - a[1]) / 2, (b[2] - b[1]) / 2))
            used += [c for c in (cell, other) if c not in used]
        if not diffs:
            return None
        if len(diffs) == 1:
            return diffs[0], diffs[0] - halves[0], diffs[0] + halves[0], 1, used
        mean, low, high = t_interval(diffs)
        return mean, low, high, len(diffs), used

    def unparsed(self, cell_ids: list[str]) -> bool:
        """Whether any of the cells' replies fail to parse more often than `INVALID_LIMIT` (shown checkpoint, test)."""
        rates = [self.value[(c, "validation")].get("invalid_action_rate") for c in cell_ids]
        return any(r is not None and not math.isnan(r[0]) and r[0] > INVALID_LIMIT for r in rates)

    def planned(self, domain: str, agent: str, stage: str, lambdas) -> int:
        """How many cells (seeds) the plan has for a group, finished or not."""
        return sum(1 for c in self.cells.values() if c["domain"] == domain and c["agent"] == agent and c["stage"] == stage
                   and (tuple(c["lambdas"]) if c["lambdas"] else None) == lambdas)

    def label(self, agent: str, stage: str, lambdas, cell_ids: list[str]) -> str:
        """The row label of a group, marked when its replies do not parse, and with how many of its
        planned seeds finished when not all did (a half-finished run's row is not the stage's result)."""
        planned = self.planned(self.cells[cell_ids[0]]["domain"], agent, stage, lambdas) if cell_ids else 0
        partial = f" ({len(cell_ids)} of {planned} seeds finished)" if len(cell_ids) < planned else ""
        return _group_label(agent, stage, lambdas) + partial + (f" {UNPARSED}" if self.unparsed(cell_ids) else "")

    def all_exact(self, domain: str, name: str) -> bool:
        """Whether every value of `name` the domain's tables show (each cell's checkpoint chosen on
        validation, test split) is exact (results.parquet's `exact`)."""
        found = [self.value.get((cell_id, "validation"), {}).get(name) for cell_id, cell in self.cells.items()
                 if cell["domain"] == domain]
        found = [f for f in found if f is not None]
        return bool(found) and all(f[3] for f in found)

    def exact_name(self, domain: str) -> str | None:
        for cell_id, result in self.results.items():
            if self.cells[cell_id]["domain"] == domain and result.get("exact_value"):
                return result["exact_value"]
        return None


def fmt(entry) -> str:
    if entry is None:
        return "n/a"
    value, low, high = entry[:3]
    if isinstance(low, float) and (math.isnan(low) or low == high):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def _group_label(agent: str, stage: str, lambdas) -> str:
    label = f"{agent} · {STAGE_LABEL[stage]}"
    if stage in ("sepo", "constant") and lambdas:
        label += " λ=" + "/".join(f"{v:g}" for v in lambdas)
    return label


# ------------------------------------------------------------------------------------ figures

def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def figure1_pairs(results: Results) -> list[dict]:
    """Every (domain, agent) with finished Base and SEPO cells (first λ point of the grid) and its
    ΔSafety paired by seed; `delta` None where safety was not measured in both."""
    pairs = []
    for domain in results.domains():
        groups = results.groups(domain)
        for (agent, stage, lambdas), cells in groups.items():
            if stage != "sepo" or (agent, "base", None) not in groups:
                continue
            if any(s == "sepo" and a == agent and lam != lambdas for (a, s, lam) in groups if list(groups).index((a, s, lam)) <
                   list(groups).index((agent, stage, lambdas))):
                continue  # the first λ point only
            delta = results.paired(cells, groups[(agent, "base", None)], "safety")
            unparsed = results.unparsed(cells) or results.unparsed(groups[(agent, "base", None)])
            pairs.append({"domain": domain, "agent": agent, "lambdas": lambdas, "delta": delta, "cells": delta[4] if delta else cells,
                          "unparsed": unparsed})
    return pairs


def interval_basis(bars: list[dict]) -> str:
    """What Figure 1's intervals are over: seeds (a t-interval), or, for a bar of one seed, that
    cell's episodes (the bootstrap half-widths of SEPO and Base added in quadrature)."""
    seeds = {b["delta"][3] for b in bars}
    return ("over seeds" if 1 not in seeds else "one seed: over episodes" if seeds == {1}
            else "over seeds; over episodes where one seed")


def figure_delta_safety(results: Results) -> tuple[bytes, list[dict]] | None:
    """Figure 1's analogue: ΔSafety = SEPO − Base per domain and agent (first λ point of the grid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [pair for pair in figure1_pairs(results) if pair["delta"] is not None]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(bars) + 2), 4))
    xs = np.arange(len(bars))
    values = [b["delta"][0] for b in bars]
    errors = np.array([[b["delta"][0] - b["delta"][1] for b in bars], [b["delta"][2] - b["delta"][0] for b in bars]])
    colors = ["#bbbbbb" if b["unparsed"] else "#1f77b4" if v >= 0 else "#d62728" for b, v in zip(bars, values)]
    drawn = ax.bar(xs, values, yerr=np.nan_to_num(errors), capsize=4, color=colors, edgecolor="black", linewidth=0.5)
    for bar, b in zip(drawn, bars):
        if b["unparsed"]:
            bar.set_hatch("///")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(xs, [f"{b['domain']}\n{b['agent']}" + (f" {UNPARSED}" if b["unparsed"] else "") for b in bars], fontsize=8)
    if any(b["unparsed"] for b in bars):
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(facecolor="#bbbbbb", edgecolor="black", hatch="///",
                                 label=f"{UNPARSED} invalid rate > {INVALID_LIMIT:.0%}: fallback, not a result")], fontsize=7)
    ax.set(ylabel="ΔSafety = SEPO − Base", title=f"Safety improvement\n(95% interval {interval_basis(bars)})")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _png(fig), bars


LINESTYLES = ("-", "--", ":", "-.")


def figure_curves(results: Results, domain: str) -> bytes | None:
    """Training curves: the exact value and the utility against step for every training cell."""
    import matplotlib.pyplot as plt

    from sepo.training.checkpoint import MetricsLog

    from sepo.reports.plots import value_label

    value_name = results.exact_name(domain) or "exploitability"
    lines = []
    for (agent, stage, lambdas), cells in results.groups(domain).items():
        for cell in cells:
            run = results.folder / "cells" / cell / "train"
            if not (run / "metrics.jsonl").exists():
                continue
            records = [r for r in MetricsLog(run / "metrics.jsonl").read() if not r.get("final") and value_name in r]
            if records:
                lines.append((f"{_group_label(agent, stage, lambdas)} s{results.cells[cell]['seed']}", records))
    if not lines:
        return None
    def utility(record):  # a language-model run logs the utility of its table as `utility_exact`
        return record.get("utility", record.get("utility_exact", np.nan))

    with_utility = any(not math.isnan(utility(r)) for _, records in lines for r in records)
    fig, axes = plt.subplots(1, 2 if with_utility else 1, figsize=(11 if with_utility else 6, 3.8), squeeze=False)
    left = axes[0][0]
    for i, (label, records) in enumerate(lines):
        steps = [r["step"] for r in records]
        # a line style per cell besides the colour: cells that trained alike (the constant ablation and
        # payoff-only GRPO) draw the same line, and the later one would hide the earlier
        style = {"label": label, "linewidth": 1.2, "linestyle": LINESTYLES[i % len(LINESTYLES)]}
        left.plot(steps, [r[value_name] for r in records], **style)
        if with_utility:
            axes[0][1].plot(steps, [utility(r) for r in records], **style)
    left.set(xlabel="step", ylabel=value_label(value_name, [r for _, records in lines for r in records]),
             title=f"{domain}: {value_name.replace('_', ' ')}")
    if with_utility:
        axes[0][1].set(xlabel="step", ylabel="utility vs train pool", title=f"{domain}: utility")
    axes[0][-1].legend(fontsize=6, loc="best")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def figure_sweep(results: Results, domain: str) -> bytes | None:
    """λ-sweep trade-off: each SEPO λ point's exact value against its utility (test episodes)."""
    import matplotlib.pyplot as plt

    value_name = results.exact_name(domain)
    if value_name is None:
        return None
    points = defaultdict(list)
    for (agent, stage, lambdas), cells in results.groups(domain).items():
        if stage in ("sepo", "grpo") and lambdas is not None:
            e, u = results.metric(cells, value_name), results.metric(cells, "utility")
            if e is not None and u is not None:
                points[agent].append((lambdas[0], e[0], u[0]))
    if not any(len(v) >= 2 for v in points.values()):
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for agent, items in points.items():
        items.sort()
        ax.plot([p[1] for p in items], [p[2] for p in items], marker="o", label=agent)
        for lam, e, u in items:
            ax.annotate(f"λe={lam:g}", (e, u), fontsize=7, textcoords="offset points", xytext=(4, 4))
    exact = " (exact)" if results.all_exact(domain, value_name) else ""
    ax.set(xlabel=f"{value_name.replace('_', ' ')}{exact}", ylabel="utility (test episodes)", title=f"{domain}: λ sweep trade-off")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def figure_frontier(results: Results, domain: str) -> bytes | None:
    """The domain's exact frontier (where it has one) with the trained tabular policies on it."""
    from sepo.games import get_domain
    from sepo.opponents.pools import BEST_RESPONSE, default_pools

    spec = get_domain(domain)
    if spec.frontier is None:
        return None
    runs, labels = [], []
    for (agent, stage, lambdas), cells in results.groups(domain).items():
        for cell in cells:
            run = results.folder / "cells" / cell / "train"
            if (run / "policy.json").exists():
                runs.append(run)
                labels.append(f"{_group_label(agent, stage, lambdas)} s{results.cells[cell]['seed']}")
    lambdas = sorted({lam[0] for (_, s, lam) in results.groups(domain) if s == "sepo" and lam} | {0.25, 1.0, 4.0})
    train = [s for s in default_pools(domain)["train"] if s.name != BEST_RESPONSE]
    report, frontier = spec.frontier(train, lambdas, runs)
    import tempfile

    from sepo.reports.plots import plot_frontier

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frontier.png"
        plot_frontier(frontier, path, [{"label": label, **run} for label, run in zip(labels, report["runs"])],
                      title=f"{domain}: frontier and trained points")
        return path.read_bytes()


# ------------------------------------------------------------------------------------ the report

class Document:
    """One report written twice: Markdown (images as files) and self-contained HTML (images inline)."""

    def __init__(self, title: str):
        self.md: list[str] = [f"# {title}", ""]
        self.html: list[str] = [f"<h1>{html.escape(title)}</h1>"]
        self.images: dict[str, bytes] = {}
        self.title = title

    def heading(self, text: str, level: int = 2, anchor: str | None = None):
        self.md += [f"{'#' * level} {text}", ""]
        ident = f' id="{html.escape(anchor)}"' if anchor else ""
        self.html.append(f"<h{level}{ident}>{html.escape(text)}</h{level}>")

    def para(self, text: str):
        self.md += [text, ""]
        self.html.append(f"<p>{html.escape(text)}</p>")

    def table(self, header: list[str], rows: list[list[str]], anchor: str, titles: list[str] | None = None):
        self.md.append("| " + " | ".join(header) + " |")
        self.md.append("|" + "---|" * len(header))
        for row in rows:
            self.md.append("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")
        self.md.append("")
        body = "".join(
            f"<tr{(' title=' + chr(34) + html.escape(titles[i]) + chr(34)) if titles else ''}>"
            + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for i, row in enumerate(rows))
        self.html.append(f'<table class="results" id="{html.escape(anchor)}"><thead><tr>'
                         + "".join(f"<th>{html.escape(h)}</th>" for h in header) + f"</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, name: str, png: bytes, caption: str):
        self.images[name] = png
        self.md += [f"![{caption}]({name})", "", f"*{caption}*", ""]
        data = base64.b64encode(png).decode()
        self.html.append(f'<figure id="fig-{html.escape(name)}"><img class="figure" alt="{html.escape(caption)}" '
                         f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption></figure>')

    def render_html(self) -> str:
        style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}"
                 "table.results{border-collapse:collapse;margin:1em 0;font-size:13px}"
                 "table.results td,table.results th{border:1px solid #888;padding:3px 7px;text-align:right}"
                 "table.results th{background:#dde6f0}table.results td:first-child{text-align:left}"
                 "img.figure{max-width:100%;border:1px solid #ccc}figcaption{font-size:12px;color:#555}")
        # marks, once the page has loaded, how many figures decoded: a browser test reads it back
        script = ("<script>window.addEventListener('load',function(){var i=document.querySelectorAll('img.figure'),n=0;"
                  "i.forEach(function(m){if(m.complete&&m.naturalWidth>0)n++});"
                  "document.body.setAttribute('data-figures-decoded',n+'/'+i.length);});</script>")
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style>{script}</head><body>" + "\n".join(self.html) + "</body></html>\n")


def build_report(folder: str | Path, results: Results | None = None) -> Document:
    folder = Path(folder)
    results = results or Results(folder)
    plan = results.plan
    doc = Document(f"Experiment report: {folder.name}")
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
    paper = paper_numbers()
    for domain in results.domains():
        _domain_section(doc, results, domain, paper)
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
    _selection_section(doc, results)
    _appendix(doc, results)
    return doc


def _domain_section(doc: Document, results: Results, domain: str, paper: dict):
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


def file_stem(name: str) -> str:
    """A domain name as a portable file name: a family member's `PREFIX:GAME(k=v)` holds a colon
    (read as a URL scheme by a markdown link) and brackets, so every run of other characters
    becomes one underscore."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "domain"


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


def _selection_section(doc: Document, results: Results):
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


def _appendix(doc: Document, results: Results):
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


def write_report(experiment: str | Path, run, results: Results | None = None) -> dict:
    """Build the report (from `results`, read already) and write report.md, its images and report.html
    through the run folder `run`."""
    doc = build_report(experiment, results)
    for name, png in doc.images.items():
        run.write_bytes(name, png)
    run.write_text("report.md", "\n".join(doc.md) + "\n")
    run.write_text("report.html", doc.render_html())
    return {"images": len(doc.images), "markdown": str(run.root / "report.md"), "html": str(run.root / "report.html")}


def check_experiment(folder: str | Path) -> Path:
    from sepo.runs import read_manifest

    folder = Path(folder)
    if not folder.is_dir():
        if folder.exists():  # most likely the config file: the report reads the experiment's --out folder
            raise SepoError(f"{folder} is a file, not an experiment folder; give the --out folder of `sepo experiment run`")
        raise SepoError(f"experiment folder not found: {folder}")
    manifest = read_manifest(folder)
    if manifest is None or manifest["command"] != "experiment run":
        raise SepoError(f"{folder} is not the output of `sepo experiment run`")
    return folder


def experiment_state(folder: Path) -> dict:
    """What a report of `folder` depends on besides its path: the experiment's config hash, a digest of
    the files it reads (`built_from`), and whether every cell finished (a report of a running
    experiment is redone on the next call)."""
    from sepo.runs import read_manifest

    manifest = read_manifest(folder) or {}
    plan = folder / "plan.json"
    digest = None
    cells = []
    if plan.is_file():
        from sepo.training.checkpoint import read_json

        data = read_json(plan, "experiment plan")
        data = data if isinstance(data, dict) else {}
        digest = data.get("config_hash")
        cells = [c.get("id") for c in data.get("cells") or [] if isinstance(c, dict)] if isinstance(data.get("cells"), list) else []
    return {"config_hash": digest, "built_from": inputs_digest(folder, cells),
            "experiment_complete": bool(manifest.get("complete"))}


def inputs_digest(folder: Path, cells: list) -> str:
    """sha256 over the files a report reads: plan.json, results.parquet and every cell's result.json
    (a missing one counts as missing). Before, a report's identity was the config hash alone, so a
    report of an experiment rerun with the same config was called complete, with the old numbers."""
    import hashlib

    digest = hashlib.sha256()
    for name in ["plan.json", "results.parquet", *(f"cells/{c}/result.json" for c in cells if isinstance(c, str))]:
        path = folder / name
        digest.update(name.encode() + b"\0")
        if path.is_file():
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        else:
            digest.update(b"missing")
        digest.update(b"\0")
    return digest.hexdigest()


DERIVED = ("config_hash", "built_from")
"""The report's config fields that record what it was built from: a report of the same experiment
differing only in them is stale and rebuilt (`sepo.runs.open_run(derived=)`), never called complete."""


def report_config(folder: Path, state: dict) -> dict:
    """The report run's config: the experiment it reads (its identity) and what it was built from."""
    return {"experiment": str(folder.resolve()), "config_hash": state["config_hash"], "built_from": state["built_from"]}
