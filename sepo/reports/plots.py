"""Plots a person would rather look at than read: training curves and the RNR frontier."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sepo.errors import SepoError, brief  # noqa: E402
from sepo.runs import FILE_MODE, STAMP_KEY, temporary_prefix  # noqa: E402
from sepo.training.checkpoint import MetricsLog, read_json  # noqa: E402


def run_label(run_dir: Path) -> str:
    config = read_json(run_dir / "config.json", "run config")
    if not isinstance(config, dict) or not isinstance(config.get("penalty"), str) \
            or not isinstance(config.get("lambda_e"), (int, float)):
        raise SepoError(f"{run_dir / 'config.json'}: not the config of a `sepo train` run (needs penalty and "
                        "lambda_e)")
    return f"{run_dir.name}: {config['penalty']}, λe={config['lambda_e']:g}"


def value_label(name: str, records: list[dict]) -> str:
    """An axis label for a per-step solver value: `exact` only when every record's policy was read
    exactly (a language model's is usually estimated from sampled replies, and its record says so)."""
    if any(r.get("value_upper_bound") for r in records):  # a trainer's value that is a bound says so
        return f"{name.replace('_', ' ')} (an upper bound, not exact)"
    if any(r.get("value_exact") == 0.0 for r in records):
        return f"{name.replace('_', ' ')} (a bound, not exact)"
    policies = sorted({str(r.get("policy", "exact")) for r in records})
    how = "exact" if policies == ["exact"] else "policy " + " or ".join(policies)
    return f"{name.replace('_', ' ')} ({how})"


def run_curves(run_dir: Path) -> tuple[str, list[int], list[float], list[float]]:
    """The exact value's name (exploitability or the domain's), steps, that value and the pool
    utility of a training run, per step; a hole in the history is an error."""
    if not run_dir.is_dir():
        raise SepoError(f"run directory not found: {run_dir}")
    records = [r for r in MetricsLog(run_dir / "metrics.jsonl").read() if not r.get("final")]
    if not records:
        raise SepoError(f"{run_dir} has no metrics.jsonl records")
    value = records[0].get("exact_value", "exploitability")
    steps, exact, utility = [], [], []
    for record in records:
        e, u = record.get(value), record.get("utility", record.get("utility_exact"))
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                   for v in (e, u)):
            raise SepoError(f"{run_dir / 'metrics.jsonl'}: step {record['step']} has no finite "
                            f"{brief(value, 40)} and utility (plot draws `sepo train` runs)")
        if steps and record["step"] != steps[-1] + 1:
            raise SepoError(f"{run_dir / 'metrics.jsonl'}: steps {steps[-1] + 1}-{record['step'] - 1} are "
                            "missing")
        steps.append(record["step"])
        exact.append(float(e))
        utility.append(float(u))
    return str(value), steps, exact, utility, value_label(str(value), records)


def plot_runs(run_dirs: list[str | Path], out: str | Path, stamp: dict | None = None,
              title: str | None = None) -> Path:
    """Exploitability (or the domain's exact value) and pool utility against step, one line per
    run, in one figure (`title` above both panels)."""
    games = {Path(d).name: read_json(Path(d) / "config.json", "run config").get("game") for d in run_dirs}
    if len(set(games.values())) > 1:
        shown = ", ".join(f"{name} ({game})" for name, game in list(games.items())[:4])
        raise SepoError(f"sepo plot draws runs of one game on shared axes, in its units; these are of "
                        f"{len(set(games.values()))} games: {shown}; plot each game's runs apart")
    curves = [(run_label(Path(d)), *run_curves(Path(d))) for d in run_dirs]
    fig, (ax_e, ax_u) = plt.subplots(1, 2, figsize=(11, 4))
    for label, value, steps, exact, utility, _ in curves:
        ax_e.plot(steps, exact, label=label)
        ax_u.plot(steps, utility, label=label)
    value = curves[0][1]
    labels = sorted({c[-1] for c in curves})
    ax_e.set(xlabel="step", yscale="log", title="Exploitability",
             ylabel=labels[0] if len(labels) == 1 else f"{value.replace('_', ' ')} (exact or estimated)")
    every_exact = all(label.endswith("(exact)") for label in labels)
    ax_u.set(
        xlabel="step",
        title="Utility against the train pool",
        ylabel="utility vs train pool (per round, " + ("exact)" if every_exact else "at the policy read)"),
    )
    ax_u.legend(fontsize=8)
    ax_e.grid(alpha=0.3)
    ax_u.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out, stamp)


def plot_frontier(frontier, out: str | Path, runs: list[dict] | None = None,
                  title: str = "best achievable trade-off", unit: str = "payoff per round",
                  stamp: dict | None = None) -> Path:
    """The utility-vs-exploitability frontier, its RNR points, and trained policies against it; the
    legend below the axes (it would hide points inside them), one entry per group of points."""
    groups: dict[str, list[dict]] = {}  # points of one group (a method over seeds) share a colour
    for run in runs or []:
        groups.setdefault(run.get("group", run["label"]), []).append(run)
    fig, ax = plt.subplots(figsize=(7.5, 4.5 + 0.19 * (len(groups) + 2)), layout="constrained")
    ends = [run.get("exploitability_interval", (0, run["exploitability"]))[1] for run in runs or []]
    far = max([frontier.epsilons[-1]] + [e for e in ends if math.isfinite(e)])
    epsilons = list(frontier.epsilons) + [far * 1.05]  # the frontier is flat beyond the best response
    utilities = list(frontier.utilities) + [frontier.utilities[-1]]
    ax.plot(epsilons, utilities, color="black", label="frontier u*(e) (LP)")
    for point in frontier.rnr:
        ax.scatter(point.exploitability, point.utility, marker="s", color="grey", s=18)
    if frontier.rnr:
        ax.scatter([], [], marker="s", color="grey", s=18, label="RNR points")
    # the RNR points are grey and the frontier black: no group gets either
    from matplotlib.colors import to_hex

    colours = [c for c in map(to_hex, plt.rcParams["axes.prop_cycle"].by_key()["color"]) if c not in GREYS]
    for k, (group, members) in enumerate(groups.items()):
        colour = colours[k % len(colours)]
        for n, run in enumerate(members):
            label = None if n else _legend_label(group, members)
            if "exploitability_interval" in run:  # an audited policy: its intervals, hollow if estimated
                (e_low, e_high), (u_low, u_high) = run["exploitability_interval"], run["utility_interval"]
                e, u = run["exploitability"], run["utility"]
                estimated = run.get("estimated", True)
                ax.errorbar(e, u, xerr=[[max(e - e_low, 0)], [max(e_high - e, 0)]],
                            yerr=[[max(u - u_low, 0)], [max(u_high - u, 0)]], fmt="o" if estimated else "s",
                            markersize=6, capsize=3, zorder=3, label=label, color=colour,
                            fillstyle="none" if estimated else "full")
            else:
                ax.scatter(run["exploitability"], run["utility"], s=40, zorder=3, label=label, color=colour)
    ax.set(xlabel=f"exploitability e ({unit})", ylabel=f"utility vs train pool ({unit})", title=title)
    ax.grid(alpha=0.3)
    fig.legend(fontsize=8, loc="outside lower center")
    return _save(fig, out, stamp)


GREYS = {"#7f7f7f", "#8c8c8c", "#808080", "#000000"}
"""Colours the frontier plot keeps for the frontier and its RNR points."""


def _legend_label(group: str, members: list[dict]) -> str:
    """One legend entry per group: a lone point keeps its own label; several (the seeds of one
    method) are named once, with their seeds and whether they were estimated."""
    if len(members) == 1:
        return members[0]["label"]
    estimated = any(run.get("estimated", False) for run in members)
    how = "estimated" if estimated else "exact"
    seeds = [run.get("seed") for run in members]
    which = (f"seeds {', '.join(str(seed) for seed in seeds)}" if None not in seeds
             else f"{len(members)} points")
    return f"{group} ({which}, {how})"


def _save(fig, out, stamp: dict | None = None) -> Path:
    """Write the figure atomically; `stamp` (from `sepo.runs.output_file`) marks it as sepo's."""
    out = Path(out)
    tmp = out.with_name(f"{temporary_prefix(out)}{out.stem}.{os.getpid()}.png")
    metadata = {STAMP_KEY: json.dumps(stamp, sort_keys=True)} if stamp else None
    try:
        fig.savefig(tmp, dpi=120, format="png", metadata=metadata)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        if os.path.lexists(tmp):
            tmp.unlink()
    return out


def write_json(path: str | Path, data) -> None:
    from sepo.training.checkpoint import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1))
