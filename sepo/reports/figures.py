"""The report's figures, as PNG bytes: Figure 1, the training curves, the λ sweep and the frontier."""
from __future__ import annotations

import io
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from sepo.reports.results import INVALID_LIMIT, UNPARSED, Results, group_label

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
                lines.append((f"{group_label(agent, stage, lambdas)} s{results.cells[cell]['seed']}", records))
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
                labels.append(f"{group_label(agent, stage, lambdas)} s{results.cells[cell]['seed']}")
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
