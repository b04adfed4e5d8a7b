"""Plots a person would rather look at than read: training curves and the RNR frontier."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sepo.errors import SepoError  # noqa: E402
from sepo.training.checkpoint import MetricsLog, read_json  # noqa: E402


def run_label(run_dir: Path) -> str:
    config = read_json(run_dir / "config.json", "run config")
    return f"{run_dir.name}: {config['penalty']}, λe={config['lambda_e']:g}"


def plot_runs(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Exploitability (or the domain's exact value) and pool utility against step, one line per
    run, in one figure."""
    fig, (ax_e, ax_u) = plt.subplots(1, 2, figsize=(11, 4))
    for run_dir in map(Path, run_dirs):
        records = MetricsLog(run_dir / "metrics.jsonl").read()
        if not records:
            raise SepoError(f"{run_dir} has no metrics.jsonl records")
        steps = [r["step"] for r in records]
        label = run_label(run_dir)
        value = records[0].get("exact_value", "exploitability")
        ax_e.plot(steps, [r[value] for r in records], label=label)
        ax_u.plot(steps, [r["utility"] for r in records], label=label)
    ax_e.set(xlabel="step", ylabel=f"{value.replace('_', ' ')} (exact)", yscale="log", title="Exploitability")
    ax_u.set(xlabel="step", ylabel="utility vs train pool (per round, exact)", title="Utility against the train pool")
    ax_u.legend(fontsize=8)
    ax_e.grid(alpha=0.3)
    ax_u.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, out)


def plot_frontier(frontier, out: str | Path, runs: list[dict] | None = None, title: str = "best achievable trade-off",
                  unit: str = "payoff per round") -> Path:
    """The utility-vs-exploitability frontier, its RNR points, and trained policies against it."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    far = max([frontier.epsilons[-1]] + [run["exploitability"] for run in runs or []])
    epsilons = list(frontier.epsilons) + [far * 1.05]  # the frontier is flat beyond the best response
    utilities = list(frontier.utilities) + [frontier.utilities[-1]]
    ax.plot(epsilons, utilities, color="black", label="frontier u*(e) (LP)")
    for point in frontier.rnr:
        ax.scatter(point.exploitability, point.utility, marker="s", color="grey", s=18)
    if frontier.rnr:
        ax.scatter([], [], marker="s", color="grey", s=18, label="RNR points")
    for run in runs or []:
        ax.scatter(run["exploitability"], run["utility"], s=40, zorder=3, label=run["label"])
    ax.set(xlabel=f"exploitability e ({unit})", ylabel=f"utility vs train pool ({unit})", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def _save(fig, out) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(out)
    return out


def write_json(path: str | Path, data) -> None:
    from sepo.training.checkpoint import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1))
