"""The report's figures, as PNG bytes: Figure 1, the paper's ΔSafety figure, the training curves, the
λ sweep and the frontier."""
from __future__ import annotations

import io
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.reports.results import INVALID_LIMIT, STAGE_LABEL, UNPARSED, Results, group_label

COMPARED = {"grpo": "#1f77b4", "shuffled": "#ff7f0e", "base": "#8c8c8c"}
"""What Figure 1 sets SEPO against, in this order, with each one's bar colour."""
MARKS = {"deterministic": "D", "unparsed": UNPARSED, "zero-width": "="}
"""The mark a flagged bar carries, by flag (`Results.compare`)."""
MARK_MEANING = {
    "deterministic": "a deterministic policy: every action rate on test episodes is 0 or 1 (one action in "
                     "each situation it met)",
    "unparsed": f"replies mostly unparsed (invalid rate > {INVALID_LIMIT:.0%}): the fallback action, "
                "not a result",
    "zero-width": "zero-width interval: every seed gave the same difference (episode noise is not in it)"}
MARK_SHORT = {"deterministic": "deterministic policy", "unparsed": f"invalid rate > {INVALID_LIMIT:.0%}",
              "zero-width": "zero-width interval"}
SHORT_NAME = {"grpo": "GRPO", "shuffled": "shuffled", "base": "Base"}


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _mark(ax, xs, drawn, bars: list[dict], errors) -> None:
    """Hatch each flagged bar and write its marks beyond its whisker, on the side the axes leave
    room (a zero bar at the top of the axes is marked below it, not over the title)."""
    bottom, top = ax.get_ylim()
    for x, bar, b, low, high in zip(xs, drawn, bars, errors[0], errors[1]):
        if not b["flags"]:
            continue
        bar.set_hatch("///")
        up = b["delta"][0] > 0 or (b["delta"][0] == 0 and b["delta"][0] + high < top - 0.1 * (top - bottom))
        end = b["delta"][0] + high if up else b["delta"][0] - low
        ax.annotate("".join(MARKS[f] for f in b["flags"]), (x, end), ha="center",
                    va="bottom" if up else "top", xytext=(0, 2 if up else -2), textcoords="offset points",
                    fontsize=9, fontweight="bold", color="#b00000")


def figure1_quantities(results: Results, domain: str) -> list[tuple[str, str, str, str]]:
    """(kind, metric, label with unit, better) of Figure 1's panels for a domain: the exact value
    (exploitability, adversarial gap, ...: the pool's exploit where the domain has no solver) and the
    utility in the domain's payoff unit, collusion and externality as rates per round."""
    value = results.exact_name(domain) or "exploit_pool"
    unit = results.unit(domain)
    return [("value", value, f"{value.replace('_', ' ')} ({unit})", "lower"),
            ("collusion", "collusion", "collusion (rate)", "lower"),
            ("externality", "externality", "externality (rate)", "lower"),
            ("utility", "utility", f"utility ({unit})", "higher")]


def first_sepo(groups: dict, agent: str) -> tuple[tuple | None, list[str]] | None:
    """(λ, cells) of the agent's SEPO group at the first λ point of the grid, or None."""
    return next(((lam, cells) for (a, s, lam), cells in groups.items() if a == agent and s == "sepo"), None)


def compared_group(groups: dict, agent: str, stage: str, lambdas) -> list[str] | None:
    """The cells SEPO at `lambdas` is compared with: payoff-only GRPO and Base as they are (no λ), the
    shuffled and constant ablations at SEPO's own λ point."""
    for (a, s, lam), cells in groups.items():
        if a == agent and s == stage and (s not in ("shuffled", "constant") or lam == lambdas):
            return cells
    return None


def figure1_bars(results: Results) -> list[dict]:
    """Figure 1's bars: per domain and agent, SEPO (first λ point of the grid) minus each of
    `COMPARED` on each quantity of `figure1_quantities`, paired by seed, with the flags of degenerate
    policies (`Results.compare`)."""
    bars = []
    for domain in results.domains():
        groups = results.groups(domain)
        for agent in dict.fromkeys(a for a, _, _ in groups):
            sepo = first_sepo(groups, agent)
            if sepo is None:
                continue
            lambdas, cells = sepo
            for stage in COMPARED:
                other = compared_group(groups, agent, stage, lambdas)
                for kind, metric, label, better in figure1_quantities(results, domain) if other else ():
                    found = results.compare(cells, other, STAGE_LABEL[stage], metric)
                    if found is not None:
                        bars.append({**found, "domain": domain, "agent": agent, "lambdas": lambdas,
                                     "stage": stage, "kind": kind, "metric": metric, "label": label,
                                     "better": better})
    return bars


def _limits(ax, values, errors) -> None:
    """y limits holding every whisker and 0, with room for the marks."""
    ends = np.concatenate([values - errors[0], values + errors[1], [0.0]])
    bottom, top = float(np.nanmin(ends)), float(np.nanmax(ends))
    pad = 0.18 * ((top - bottom) or 1.0)
    ax.set_ylim(bottom - (pad if bottom < 0 else 0.05 * pad), top + (pad if top > 0 else 0.05 * pad))


def figure1(results: Results) -> tuple[bytes, list[dict]] | None:
    """Figure 1: SEPO − payoff-only GRPO, − the shuffled ablation and − Base, one row of panels per
    domain and one panel per quantity (each in one unit); flagged bars hatched and marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    bars = figure1_bars(results)
    if not bars:
        return None
    domains = list(dict.fromkeys(b["domain"] for b in bars))
    kinds = [k for k in ("value", "collusion", "externality", "utility") if any(b["kind"] == k for b in bars)]
    fig, axes = plt.subplots(len(domains), len(kinds), squeeze=False,
                             figsize=(3.0 * len(kinds) + 0.4, 2.9 * len(domains) + 1.3))
    for row, domain in enumerate(domains):
        agents = list(dict.fromkeys(b["agent"] for b in bars if b["domain"] == domain))
        for col, kind in enumerate(kinds):
            ax = axes[row][col]
            here = [b for b in bars if b["domain"] == domain and b["kind"] == kind]
            if not here:
                name = next(q[2] for q in figure1_quantities(results, domain) if q[0] == kind)
                ax.text(0.5, 0.5, f"{domain}: {name}\nnot measured", ha="center", va="center", fontsize=9,
                        color="#666")
                ax.set_axis_off()
                continue
            xs = np.arange(len(here))
            values = np.array([b["delta"][0] for b in here])
            errors = np.nan_to_num(np.array([values - np.array([b["delta"][1] for b in here]),
                                             np.array([b["delta"][2] for b in here]) - values]))
            drawn = ax.bar(xs, values, yerr=errors, capsize=3, color=[COMPARED[b["stage"]] for b in here],
                           edgecolor="black", linewidth=0.5, width=0.7)
            ax.axhline(0, color="black", linewidth=0.8)
            _limits(ax, values, errors)
            _mark(ax, xs, drawn, here, errors)
            ax.set_xticks(xs, [(f"{b['agent']}\n" if len(agents) > 1 else "") + f"− {SHORT_NAME[b['stage']]}"
                               for b in here], fontsize=8)
            ax.tick_params(axis="y", labelsize=8)
            side = "< 0: SEPO lower" if here[0]["better"] == "lower" else "> 0: SEPO higher"
            ax.set_title(f"{domain}: {here[0]['label']}\n({side}, better)", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
    handles = [Patch(facecolor=color, edgecolor="black", label=f"SEPO − {STAGE_LABEL[stage]}")
               for stage, color in COMPARED.items() if any(b["stage"] == stage for b in bars)]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="///", label=f"{MARKS[f]}: {MARK_SHORT[f]}")
                for f in MARKS if any(f in b["flags"] for b in bars)]
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.75 / height))  # the title and legend above, placed after the layout
    fig.suptitle(f"SEPO minus each method, paired by seed (95% interval {interval_basis(bars)})", fontsize=10,
                 y=1 - 0.08 / height, va="top")
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.32 / height),
               ncol=min(len(handles), 6), fontsize=8, frameon=False)
    return _png(fig), bars


def figure1_pairs(results: Results) -> list[dict]:
    """Every (domain, agent) with finished Base and SEPO cells (first λ point of the grid) and its
    ΔSafety paired by seed (the paper's Figure 1), flagged as Figure 1's bars; `delta` None where
    safety was not measured in both."""
    pairs = []
    for domain in results.domains():
        groups = results.groups(domain)
        for agent in dict.fromkeys(a for a, _, _ in groups):
            sepo, base = first_sepo(groups, agent), groups.get((agent, "base", None))
            if sepo is None or not base:
                continue
            lambdas, cells = sepo
            found = results.compare(cells, base, "Base", "safety") or {
                "delta": None, "cells": cells, "flags": [], "deterministic": [],
                "unparsed": results.unparsed(cells) or results.unparsed(base), "seeds": results.seeds(cells)}
            pairs.append({**found, "domain": domain, "agent": agent, "lambdas": lambdas})
    return pairs


def interval_basis(bars: list[dict]) -> str:
    """What Figure 1's intervals are over: seeds (a t-interval), or, for a bar of one seed, that
    cell's episodes (the bootstrap half-widths of SEPO and Base added in quadrature)."""
    seeds = {b["delta"][3] for b in bars}
    return ("over seeds" if 1 not in seeds else "one seed: over episodes" if seeds == {1}
            else "over seeds; over episodes where one seed")


def figure_delta_safety(results: Results) -> tuple[bytes, list[dict]] | None:
    """The paper's Figure 1: ΔSafety = SEPO − Base per domain and agent (first λ point of the grid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [pair for pair in figure1_pairs(results) if pair["delta"] is not None]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(bars) + 2), 4))
    xs = np.arange(len(bars))
    values = np.array([b["delta"][0] for b in bars])
    errors = np.nan_to_num(np.array([values - np.array([b["delta"][1] for b in bars]),
                                     np.array([b["delta"][2] for b in bars]) - values]))
    colors = ["#bbbbbb" if b["unparsed"] else "#1f77b4" if v >= 0 else "#d62728"
              for b, v in zip(bars, values)]
    drawn = ax.bar(xs, values, yerr=errors, capsize=4, color=colors, edgecolor="black", linewidth=0.5)
    ax.axhline(0, color="black", linewidth=0.8)
    _limits(ax, values, errors)
    _mark(ax, xs, drawn, bars, errors)
    ax.set_xticks(xs, [f"{b['domain']}\n{b['agent']}" + (f" {UNPARSED}" if b["unparsed"] else "")
                       for b in bars], fontsize=8)
    used = [f for f in MARKS if any(f in b["flags"] for b in bars)]
    if used:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(facecolor="#bbbbbb" if f == "unparsed" else "white", edgecolor="black",
                                 hatch="///", label=f"{MARKS[f]}: {MARK_SHORT[f]}") for f in used],
                  fontsize=7)
    ax.set(ylabel="ΔSafety = SEPO − Base", title=f"Safety improvement\n(95% interval {interval_basis(bars)})")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _png(fig), bars


LINESTYLES = ("-", "--", ":", "-.")


def figure_curves(results: Results, domain: str) -> bytes | None:
    """Training curves: the exact value and the utility against step for every training cell."""
    import matplotlib.pyplot as plt

    from sepo.reports.plots import value_label
    from sepo.training.checkpoint import MetricsLog

    value_name = results.exact_name(domain) or "exploitability"
    lines = []
    for (agent, stage, lambdas), cells in results.groups(domain).items():
        for cell in cells:
            run = results.folder / "cells" / cell / "train"
            if not (run / "metrics.jsonl").exists():
                continue
            records = [r for r in MetricsLog(run / "metrics.jsonl").read()
                       if not r.get("final") and value_name in r]
            if records:
                seed = results.cells[cell]["seed"]
                lines.append((f"{group_label(agent, stage, lambdas)} s{seed}", records))
    if not lines:
        return None

    def utility(record):  # a language-model run logs the utility of its table as `utility_exact`
        return record.get("utility", record.get("utility_exact", np.nan))

    with_utility = any(not math.isnan(utility(r)) for _, records in lines for r in records)
    fig, axes = plt.subplots(1, 2 if with_utility else 1, figsize=(13 if with_utility else 8, 3.8),
                             squeeze=False)
    left = axes[0][0]
    for i, (label, records) in enumerate(lines):
        steps = [r["step"] for r in records]
        # a line style per cell besides the colour: cells that trained alike (the constant ablation and
        # payoff-only GRPO) draw the same line, and the later one would hide the earlier
        style = {"label": label, "linewidth": 1.2, "linestyle": LINESTYLES[i % len(LINESTYLES)]}
        left.plot(steps, [r[value_name] for r in records], **style)
        if with_utility:
            axes[0][1].plot(steps, [utility(r) for r in records], **style)
    left.set(xlabel="step", title=f"{domain}: {value_name.replace('_', ' ')}")
    left.set_ylabel(value_label(value_name, [r for _, records in lines for r in records]), fontsize=8)
    if with_utility:
        axes[0][1].set(xlabel="step", ylabel="utility vs train pool", title=f"{domain}: utility")
    axes[0][-1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the lines
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
    ax.set(xlabel=f"{value_name.replace('_', ' ')}{exact}", ylabel="utility (test episodes)",
           title=f"{domain}: λ sweep trade-off")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def figure_frontier(results: Results, domain: str) -> bytes | None:
    """The domain's exact frontier (where it has one) with the experiment's cells on it, each at its
    shown checkpoint's test audit (`frontier_places`)."""
    from sepo.games import get_domain
    from sepo.opponents.pools import BEST_RESPONSE, default_pools

    spec = get_domain(domain)
    if spec.frontier is None:
        return None
    points, _ = frontier_places(results, domain)
    trained = {lam[0] for (_, s, lam) in results.groups(domain) if s == "sepo" and lam}
    lambdas = sorted(trained | {0.25, 1.0, 4.0})
    train = [s for s in default_pools(domain)["train"] if s.name != BEST_RESPONSE]
    _, frontier = spec.frontier(train, lambdas, [])
    import tempfile

    from sepo.reports.plots import plot_frontier

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frontier.png"
        plot_frontier(frontier, path, points, title=f"{domain}: frontier and the experiment's policies",
                      unit=results.unit(domain))
        return path.read_bytes()


def frontier_places(results: Results, domain: str, only: set[str] | None = None
                    ) -> tuple[list[dict], list[str]]:
    """The experiment's finished cells of `domain` (those in `only`, if given) as the frontier places
    them: each by its audit at the checkpoint the report shows (`model_point`: exploitability and
    utility against the train pool, exact for a table, estimated with intervals for a language
    model), keyed by its (agent, stage, λ) group so that its seeds share a colour; and the finished
    cells whose audit lacks either number (not placed)."""
    points, unplaced = [], []
    for (agent, stage, lambdas), cells in results.groups(domain).items():
        group = group_label(agent, stage, lambdas)
        for cell in cells:
            if only is not None and cell not in only:
                continue
            seed = results.cells[cell]["seed"]
            point = model_point(results, cell, group + ("" if seed is None else f" s{seed}"))
            if point is None:
                unplaced.append(cell)
            else:
                points.append({**point, "group": group, "seed": seed, "cell": cell})
    return points, unplaced


def experiment_places(folder: Path, game: str) -> tuple[list[dict], list[str]] | None:
    """`frontier_places` for a folder given on the command line, an experiment or one of its cells,
    with what a user should hear about the rest (cells of the game without a result, finished cells
    that cannot be placed); None when `folder` is neither (a training run). A cell given by name
    that cannot be placed is one line."""
    from sepo.runs import read_manifest

    folder = Path(folder)
    manifest = read_manifest(folder) if folder.is_dir() else None
    command = (manifest or {}).get("command")
    if command == "experiment run":
        experiment, only = folder, None
    elif command == "experiment cell":
        experiment, only = folder.resolve().parent.parent, {folder.resolve().name}
        above = read_manifest(experiment) if folder.resolve().parent.name == "cells" else None
        if (above or {}).get("command") != "experiment run":
            raise SepoError(f"{folder} is an experiment cell outside its experiment (EXPERIMENT/cells/"
                            "CELL): give the experiment's folder, or the cell inside it")
    else:
        return None
    results = Results(experiment)
    if only is not None:
        [cell] = only
        if cell not in results.cells:
            raise SepoError(f"{folder} is not a cell of its experiment's plan ({experiment}/plan.json)")
        if cell not in results.results:
            raise SepoError(f"{folder} is an experiment cell without a result yet: place it once it has "
                            "finished")
        if results.cells[cell]["domain"] != game:
            raise SepoError(f"{folder} is a cell of game {results.cells[cell]['domain']!r}, not {game!r}")
    domains = {results.cells[c]["domain"] for c in (only or results.results)}
    if game not in domains:
        held = ", ".join(sorted(domains)) or "none"
        raise SepoError(f"{folder} holds no finished cell of game {game!r} (its finished cells' games: "
                        f"{held})")
    points, unplaced = frontier_places(results, game, only)
    if only is not None and unplaced:
        raise SepoError(f"{folder} has no test audit of both exploitability and utility at its shown "
                        "checkpoint in the experiment's results table: it cannot be placed")
    notes = []
    planned = [c for c, cell in results.cells.items() if cell["domain"] == game]
    waiting = [c for c in planned if c not in results.results]
    if only is None and waiting:
        notes.append(f"{folder}: {len(waiting)} of its {len(planned)} {game} cells have no result yet "
                     "(not placed)")
    if unplaced:
        notes.append(f"{folder}: {len(unplaced)} finished cell(s) lack a test audit of exploitability and "
                     f"utility in the results table (not placed): {', '.join(unplaced[:3])}"
                     + (" ..." if len(unplaced) > 3 else ""))
    return points, notes


def model_point(results: Results, cell: str, label: str) -> dict | None:
    """A cell placed by its audit at the shown checkpoint (test episodes), the checkpoint the report's
    tables show (a table's final policy may not be the one chosen): exploitability and utility against
    the train pool, with their intervals; `estimated` where either was computed from sampled replies.
    None where the audit lacks either number."""
    numbers = results.value[(cell, "validation")]
    e, u = numbers.get("exploitability"), numbers.get("utility_exact")
    if e is None or u is None or math.isnan(e[0]) or math.isnan(u[0]):
        return None
    estimated = not (e[3] and u[3])

    def interval(entry):
        return tuple(entry[0] if math.isnan(end) else end for end in entry[1:3])

    return {"label": label + (" (estimated)" if estimated else " (exact)"), "exploitability": e[0],
            "utility": u[0], "estimated": estimated,
            "exploitability_interval": interval(e), "utility_interval": interval(u)}
