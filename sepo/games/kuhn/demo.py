"""`sepo demo`: Kuhn poker end to end in about a minute on a laptop CPU.

1. Audit reference agents (Nash, uniform, the paper's MaxExploiter bot) under both protocols.
2. Train tabular SEPO (λe = 5) and payoff-only GRPO from a uniform start; plot both curves.
3. Train SEPO at λe ∈ {0.25, 1, 4} and place every policy against the exact RNR frontier.
"""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from sepo.evaluation.evaluate import EvalConfig, evaluate
from sepo.games import load_game
from sepo.policies.specs import load_agent
from sepo.errors import SepoError
from sepo.reports.plots import plot_frontier, plot_runs
from sepo.runs import RunDir, open_run
from sepo.training.checkpoint import read_json
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer


def run_demo(out: Path, steps: int, console: Console, overwrite: bool = False) -> dict:
    """The domain's `demo` hook (`sepo demo`). Everything goes to the run folder `out` (see
    `sepo.runs`): one sub-folder per training run."""
    if steps < 2:
        raise SepoError(f"--steps must be >= 2, got {steps}")
    with open_run(out, "demo", {"game": "kuhn", "steps": steps}, overwrite=overwrite) as run:
        if run.finished:  # read, never redone
            summary = read_json(out / "demo_summary.json", "demo summary")
            console.print(f"the demo in {out} is already complete: see {out / 'demo_summary.json'}, "
                          f"{out / 'sepo_vs_grpo.png'} and {out / 'frontier.png'}")
            return summary
        summary = _demo(run, steps, console)
        run.complete()
    return summary


def _demo(folder: RunDir, steps: int, console: Console) -> dict:
    out = folder.root
    audit = Table(title="1. Audit (Kuhn, 200 episodes x 6 hands per opponent)")
    for column in ("agent", "protocol", "utility", "exploit_pool", "exploitability (exact)", "safety"):
        audit.add_column(column)
    audits = {}
    for spec in ("nash", "uniform", "bot:MaxExploiter"):
        for protocol in ("paper", "rigorous"):
            game = load_game("kuhn", protocol)
            result = evaluate(game, load_agent(spec, game), EvalConfig(protocol=protocol, episodes=200))
            audits[f"{spec}/{protocol}"] = result
            audit.add_row(spec, protocol, f"{result['utility']:.3f}", f"{result['exploit_pool']:.3f}",
                          f"{result['exploitability']:.3f}", f"{result['safety']:.3f}")
    console.print(audit)
    console.print("The paper's exploit score cannot see MaxExploiter's weakness (0 under `paper`); the exact "
                  "best response can (0.25).\n")

    runs = {}
    for name, penalty, lam in (("sepo_l5", "per-rollout", 5.0), ("grpo_none", "none", 0.0),
                               ("sepo_l0.25", "per-rollout", 0.25), ("sepo_l1", "per-rollout", 1.0), ("sepo_l4", "per-rollout", 4.0)):
        config = TabularSEPOConfig(penalty=penalty, lambda_e=lam, steps=steps, seed=0)
        folder.path(name)
        with console.status(f"training {name} ({penalty}, λe={lam:g}, {steps} steps)"), \
                open_run(out / name, "train", {"policy": "tabular", **config.record()}, part_of="demo") as sub:
            runs[name] = TabularSEPOTrainer(config, sub).train()
            if not sub.finished:
                plot_runs([sub.root], sub.path("curves.png"))
    comparison = plot_runs([out / "sepo_l5", out / "grpo_none"], folder.path("sepo_vs_grpo.png"))

    from sepo.cli.main import compute_frontier

    frontier_result, frontier = compute_frontier("kuhn", [out / n for n in runs], "0.25,1,4,5", None)
    plot_frontier(frontier, folder.path("frontier.png"), [{"label": Path(r["run"]).name, **r} for r in frontier_result["runs"]],
                  title="Kuhn poker: best achievable trade-off", unit="chips/hand")
    trained = Table(title=f"2-3. Trained from uniform ({steps} steps each); frontier u*(e) by exact LP")
    for column in ("run", "exploitability", "utility vs train pool", "frontier u*(e)", "gap"):
        trained.add_column(column)
    for run in frontier_result["runs"]:
        trained.add_row(Path(run["run"]).name, f"{run['exploitability']:.4f}", f"{run['utility']:.4f}",
                        f"{run['frontier_utility']:.4f}", f"{run['gap']:.4f}")
    console.print(trained)
    console.print(f"Plots: {comparison}, {out / 'frontier.png'}; run directories under {out}/")
    summary = {"audits": {k: {m: v[m] for m in ('utility', 'exploit_pool', 'exploitability', 'safety')} for k, v in audits.items()},
               "runs": frontier_result["runs"]}
    folder.write_json("demo_summary.json", summary)
    return summary
